#!/usr/bin/env node
// Example worker in Node.js (no dependencies): `echo` and `ledger_append`, envelope v1.
//
//   node examples/workers/node/worker.js < request.json
//
// JSON.parse accepts what a strict reader must refuse (duplicate keys, lone surrogates,
// unbounded nesting), so the request is first checked by strictCheck() below, and only
// then parsed. Logs go to stderr (verbose with AGENTS_RUNNER_LOG_LEVEL=debug); stdout
// carries exactly one JSON document; exit 0 with "ok", 1 with "error".
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const WORKER = { name: 'example-node', version: '1.0.0' };
const SUPPORTED = ['1.0'];
const MAX_REQUEST_BYTES = 16 * 1024 * 1024;
const MAX_DEPTH = 64;
// Section 8.1: a version has no leading zeros; anything else is INVALID_REQUEST (rule 3).
const VERSION = /^(?:0|[1-9][0-9]{0,3})\.(?:0|[1-9][0-9]{0,3})$/;
const ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const TOOL_NAME = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/;
const EXTENSION_KEY = /^[a-z][a-z0-9-]*(\.[a-z0-9-]+)*\/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const VERBOSE = process.env.AGENTS_RUNNER_LOG_LEVEL === 'debug';

const log = (message) => VERBOSE && process.stderr.write(`example-node: ${message}\n`);

class Refusal extends Error {
  constructor(code, message, retryable = false) {
    super(message);
    Object.assign(this, { code, retryable });
  }
}

// --- strict JSON -------------------------------------------------------------------------

function strictCheck(text) {
  let i = 0;
  const fail = (why) => { throw new Refusal('INVALID_REQUEST', `request is not acceptable JSON: ${why} at character ${i}`); };
  const ws = () => { while (i < text.length && ' \t\n\r'.includes(text[i])) i++; };
  const run = /[^"\\\u0000-\u001f]*/y;
  const number = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;
  const string = () => {
    let out = '';
    i++;
    for (;;) {
      run.lastIndex = i;
      out += run.exec(text)[0];
      i = run.lastIndex;
      const c = text[i];
      if (c === '"') { i++; break; }
      if (c === undefined) fail('unterminated string');
      if (c !== '\\') fail('control character in a string');
      const e = text[i + 1];
      if (e === 'u' && /^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) {
        out += String.fromCharCode(parseInt(text.slice(i + 2, i + 6), 16));
        i += 6;
      } else if (e !== undefined && '"\\/bfnrt'.includes(e)) {
        out += JSON.parse(`"\\${e}"`);
        i += 2;
      } else fail('bad escape');
    }
    if (LONE_SURROGATE.test(out)) fail('lone surrogate in a string');
    return out;
  };
  const value = (depth) => {
    ws();
    const c = text[i];
    if (c === '{' || c === '[') {
      if (depth > MAX_DEPTH) fail(`nesting deeper than ${MAX_DEPTH} levels`);
      const close = c === '{' ? '}' : ']';
      const keys = new Set();
      i++;
      ws();
      if (text[i] === close) { i++; return; }
      for (;;) {
        if (c === '{') {
          ws();
          if (text[i] !== '"') fail('expected a key');
          const key = string();
          if (keys.has(key)) fail(`duplicate key ${JSON.stringify(key.slice(0, 40))}`);
          keys.add(key);
          ws();
          if (text[i++] !== ':') fail("expected ':'");
        }
        value(depth + 1);
        ws();
        const next = text[i++];
        if (next === close) return;
        if (next !== ',') fail(`expected ',' or '${close}'`);
      }
    }
    if (c === '"') { string(); return; }
    for (const literal of ['true', 'false', 'null']) {
      if (text.startsWith(literal, i)) { i += literal.length; return; }
    }
    number.lastIndex = i;
    const m = number.exec(text);
    if (!m || m[0] === '' || m[0] === '-') fail('unexpected character');
    const n = Number(m[0]);
    if (!Number.isFinite(n)) fail('number overflows a double');
    if (!m[1] && !m[2] && !Number.isSafeInteger(n)) fail('integer outside +-(2^53-1)');
    i = number.lastIndex;
  };
  ws();
  if (text[i] !== '{') fail('expected a JSON object');
  value(1);
  ws();
  if (i !== text.length) fail('trailing data after the document');
}

function decodeRequest(bytes) {
  if (bytes.length > MAX_REQUEST_BYTES) throw new Refusal('INVALID_REQUEST', 'request over 16 MiB');
  if (bytes.length === 0) throw new Refusal('INVALID_REQUEST', 'empty input: expected one JSON object');
  if (bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) {
    throw new Refusal('INVALID_REQUEST', 'input starts with a byte order mark; send plain UTF-8');
  }
  let text;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new Refusal('INVALID_REQUEST', 'request is not valid UTF-8');
  }
  strictCheck(text);
  return JSON.parse(text);
}

// --- the envelope ------------------------------------------------------------------------

const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);
const isInt = (v, lo, hi) => Number.isSafeInteger(v) && v >= lo && v <= hi;

function checkRequest(doc) {
  const bad = (why) => { throw new Refusal('INVALID_REQUEST', `invalid ToolCallRequest: ${why}`); };
  if (!ID.test(doc.id ?? '')) bad('id: missing or not an identifier');
  if (!isObject(doc.tool) || !TOOL_NAME.test(doc.tool.name ?? '')) bad('tool.name: missing or invalid');
  if (!isObject(doc.arguments)) bad('arguments: expected an object');
  if (!isInt(doc.deadline_ms, 0, Number.MAX_SAFE_INTEGER)) bad('deadline_ms: expected an integer');
  if (!isObject(doc.limits) || !isInt(doc.limits.max_result_bytes, 1, 64 * 1024 * 1024)) {
    bad('limits.max_result_bytes: expected an integer in 1..67108864');
  }
  if (doc.context !== undefined && doc.context !== null) {
    if (!isObject(doc.context)) bad('context: expected an object');
    const key = doc.context.idempotency_key;
    if (key !== undefined && key !== null && (typeof key !== 'string' || key.length > 256)) {
      bad('context.idempotency_key: expected a string of at most 256 characters');
    }
  }
  if (doc.extensions !== undefined && doc.extensions !== null) {
    // Section 3.1: the namespace is closed, the content open.
    if (!isObject(doc.extensions)) bad('extensions: expected an object');
    for (const key of Object.keys(doc.extensions)) {
      if (key.length > 1024 || !EXTENSION_KEY.test(key)) bad(`extensions: key ${JSON.stringify(key.slice(0, 64))} is not vendor.domain/name`);
    }
  }
}

// Tools declare closed objects of bounded strings; this checks exactly that subset.
function checkArguments(schema, args) {
  const bad = (why) => { throw new Refusal('INVALID_ARGUMENTS', why); };
  for (const name of Object.keys(args)) {
    if (!(name in schema.properties)) bad(`arguments: unexpected property ${JSON.stringify(name.slice(0, 64))}`);
  }
  for (const name of schema.required) {
    if (!(name in args)) bad(`arguments: ${JSON.stringify(name)} is required`);
  }
  for (const [name, rule] of Object.entries(schema.properties)) {
    if (!(name in args)) continue;
    const value = args[name];
    if (typeof value !== 'string') bad(`arguments['${name}']: the value is not of type 'string'`);
    if (value.length > rule.maxLength && [...value].length > rule.maxLength) {
      bad(`arguments['${name}']: longer than ${rule.maxLength} characters`);
    }
  }
}

const stringArg = (name, maxLength) => ({
  type: 'object',
  properties: { [name]: { type: 'string', maxLength } },
  required: [name],
  additionalProperties: false,
});

const TOOLS = {
  echo: {
    description: 'Return the given text unchanged.',
    effects: 'none',
    input_schema: stringArg('text', 65536),
    run: (args) => ({ type: 'text', content: args.text }),
  },
  ledger_append: {
    description: 'Append an entry to the ledger, at most once per idempotency key.',
    effects: 'external',
    input_schema: stringArg('entry', 4096),
    run: ledgerAppend,
  },
};

// External effect, idempotent: one line per idempotency key, ever.
function ledgerAppend(args, request) {
  const key = request.context?.idempotency_key;
  if (!key) throw new Refusal('TOOL_FAILED', 'ledger_append needs context.idempotency_key');
  const ledger = process.env.LEDGER_FILE || path.join(os.tmpdir(), 'ledger.jsonl');
  try {
    if (fs.existsSync(ledger)) {
      for (const line of fs.readFileSync(ledger, 'utf8').split('\n')) {
        if (!line) continue;
        const record = JSON.parse(line);
        if (record.idempotency_key === key) return { type: 'json', content: { ...record, appended: false } };
      }
    }
    const record = { idempotency_key: key, entry: args.entry };
    fs.appendFileSync(ledger, JSON.stringify(record) + '\n');
    return { type: 'json', content: { ...record, appended: true } };
  } catch (err) {
    throw new Refusal('UNAVAILABLE', `the ledger cannot be used: ${err.code || err.name}`, true);
  }
}

function describe() {
  return {
    kind: 'DescribeResult',
    version: '1.0',
    worker: WORKER,
    supported_versions: SUPPORTED,
    tools: Object.entries(TOOLS).map(([name, t]) => ({
      name, description: t.description, input_schema: t.input_schema, effects: t.effects,
    })),
  };
}

function handle(bytes) {
  let id = '-'; // the reserved id (section 8.2): no request can carry it
  let version = '1.0';
  const fail = (err) => ({
    kind: 'ToolCallResult', version, id, status: 'error',
    error: { code: err.code, message: err.message.slice(0, 4096), retryable: err.retryable },
  });
  try {
    const doc = decodeRequest(bytes);
    if (typeof doc.id === 'string' && ID.test(doc.id)) id = doc.id;
    if (doc.kind !== 'ToolCallRequest' && doc.kind !== 'DescribeRequest') {
      throw new Refusal('INVALID_REQUEST', 'kind: expected ToolCallRequest or DescribeRequest');
    }
    if (typeof doc.version !== 'string' || !VERSION.test(doc.version)) {
      throw new Refusal('INVALID_REQUEST', 'version: missing or not a version (major.minor, no leading zeros)');
    }
    if (!SUPPORTED.includes(doc.version)) {
      throw new Refusal('UNSUPPORTED_VERSION', `version ${JSON.stringify(doc.version.slice(0, 16))} is not supported; supported versions: ${SUPPORTED.join(', ')}`);
    }
    version = doc.version;
    if (doc.kind === 'DescribeRequest') return describe();
    checkRequest(doc);
    log(`call ${id}: tool ${doc.tool.name}`);
    const tool = Object.hasOwn(TOOLS, doc.tool.name) ? TOOLS[doc.tool.name] : undefined;
    if (!tool) throw new Refusal('UNKNOWN_TOOL', `no tool ${JSON.stringify(doc.tool.name)}; this worker has: ${Object.keys(TOOLS).join(', ')}`);
    checkArguments(tool.input_schema, doc.arguments);
    if (Date.now() >= doc.deadline_ms) throw new Refusal('DEADLINE_EXCEEDED', 'the deadline passed before the tool ran', true);
    const result = { kind: 'ToolCallResult', version, id, status: 'ok', output: tool.run(doc.arguments, doc) };
    const size = Buffer.byteLength(JSON.stringify(result));
    if (size > doc.limits.max_result_bytes) {
      throw new Refusal('LIMIT_EXCEEDED', `result is ${size} bytes, over max_result_bytes=${doc.limits.max_result_bytes}`);
    }
    return result;
  } catch (err) {
    if (err instanceof Refusal) return fail(err);
    process.stderr.write(`example-node: internal error: ${err && err.stack}\n`);
    return fail(new Refusal('INTERNAL', `${err && err.name}: internal error`));
  }
}

const chunks = [];
let total = 0;
process.stdin.on('data', (chunk) => {
  total += chunk.length;
  if (total <= MAX_REQUEST_BYTES + 1) chunks.push(chunk);
});
process.stdin.on('end', () => {
  const answer = handle(Buffer.concat(chunks));
  const failed = answer.status === 'error';
  process.stdout.write(JSON.stringify(answer), () => process.exit(failed ? 1 : 0));
});
