#!/usr/bin/env node
// A worked envelope 1.1 worker in Node.js (no dependencies), written from
// docs/envelope-v1.md: `echo` and `ledger_append` as in ../node, plus the 1.1 members:
// input files (`files`, section 11.3), files out (`collect`, 11.4), live events framed on
// standard error (`events`, 11.5) and must-understand (`critical`, 3.1).
//
//   node examples/workers/node-files/worker.js < request.json
//
// Each call gets a fresh workspace under $TMPDIR (section 9.1), removed afterwards. Logs
// go to stderr as plain lines (verbose with AGENTS_RUNNER_LOG_LEVEL=debug), events as
// RS-framed lines; stdout carries exactly one JSON document; exit 0 with "ok", 1 with
// "error".
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const WORKER = { name: 'example-node-files', version: '1.1.0' };
const SUPPORTED = ['1.0', '1.1'];
const HIGHEST = '1.1';
const CAPABILITIES = ['events', 'files'];
const MAX_REQUEST_BYTES = 16 * 1024 * 1024;
const MAX_DEPTH = 64;
const VERSION = /^(?:0|[1-9][0-9]{0,3})\.(?:0|[1-9][0-9]{0,3})$/;
const ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const RESERVED_ID = '-'; // section 8.2: no request can carry it
const TOOL_NAME = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/;
const EXTENSION_KEY = /^[a-z][a-z0-9-]*(\.[a-z0-9-]+)*\/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
const MEMBER_NAME = /^[a-z][a-z0-9_]{0,63}$/;
const FILENAME = /^[A-Za-z0-9_][A-Za-z0-9_. -]{0,254}$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
// Section 11.2: C0, DEL, C1, backslash and the bidirectional controls.
const BAD_PATH_CHARACTER = /[\u0000-\u001f\u007f-\u009f\\\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;
// The members of a request this worker implements (what `critical` may name).
const IMPLEMENTED = new Set(['kind', 'version', 'id', 'tool', 'arguments', 'deadline_ms', 'limits',
  'context', 'extensions', 'files', 'collect', 'events', 'critical']);
const MEMBERS_1_1 = ['files', 'collect', 'events', 'critical'];
const MAX_FILES = 64;
const MAX_FILES_BYTES = 16 * 1024 * 1024;
const MAX_PARTS = 256;
const MAX_EVENT_LINE = 16384;
const RS = '\u001e';
const VERBOSE = process.env.AGENTS_RUNNER_LOG_LEVEL === 'debug';

const log = (message) => VERBOSE && process.stderr.write(`example-node-files: ${message}\n`);

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
const invalid = (why) => { throw new Refusal('INVALID_REQUEST', `invalid ToolCallRequest: ${why}`); };

function checkRequest(doc) {
  if (!ID.test(doc.id ?? '')) invalid('id: missing or not an identifier');
  if (!isObject(doc.tool) || !TOOL_NAME.test(doc.tool.name ?? '')) invalid('tool.name: missing or invalid');
  if (!isObject(doc.arguments)) invalid('arguments: expected an object');
  if (!isInt(doc.deadline_ms, 0, Number.MAX_SAFE_INTEGER)) invalid('deadline_ms: expected an integer');
  if (!isObject(doc.limits) || !isInt(doc.limits.max_result_bytes, 1, 64 * 1024 * 1024)) {
    invalid('limits.max_result_bytes: expected an integer in 1..67108864');
  }
  if (doc.context !== undefined && doc.context !== null) {
    if (!isObject(doc.context)) invalid('context: expected an object');
    const key = doc.context.idempotency_key;
    if (key !== undefined && key !== null && (typeof key !== 'string' || key.length > 256)) {
      invalid('context.idempotency_key: expected a string of at most 256 characters');
    }
  }
  if (doc.extensions !== undefined && doc.extensions !== null) {
    // Section 3.1: the namespace is closed, the content open.
    if (!isObject(doc.extensions) || Object.keys(doc.extensions).length > 64) invalid('extensions: expected an object of at most 64 members');
    for (const key of Object.keys(doc.extensions)) {
      if (key.length > 1024 || !EXTENSION_KEY.test(key)) invalid(`extensions: key ${JSON.stringify(key.slice(0, 64))} is not vendor.domain/name`);
    }
  }
  if (doc.version === '1.1') {
    checkCritical(doc);
    if (doc.files != null) doc.files = checkFiles(doc.files);
    if (doc.collect != null) doc.collect = checkCollect(doc.collect);
    if (doc.events != null) doc.events = checkEvents(doc.events);
  } else {
    for (const name of MEMBERS_1_1) delete doc[name]; // a 1.0 request: must-ignore (11.1)
  }
}

// Section 3.1, as JWS's `crit`: refuse what it names and this worker does not implement,
// what the request does not carry, and a name given twice.
function checkCritical(doc) {
  const names = doc.critical;
  if (names === undefined || names === null) return;
  if (!Array.isArray(names) || names.length > 16) invalid('critical: expected at most 16 names');
  const seen = new Set();
  names.forEach((name, index) => {
    const where = `critical[${index}]`;
    if (typeof name !== 'string' || name.length > 1024 || !(MEMBER_NAME.test(name) || EXTENSION_KEY.test(name))) {
      invalid(`${where}: neither a member name nor an extension key`);
    }
    if (seen.has(name)) invalid(`${where}: ${JSON.stringify(name)} appears twice`);
    seen.add(name);
    if (name.includes('/') || !IMPLEMENTED.has(name)) {
      invalid(`${where}: ${JSON.stringify(name.slice(0, 64))} is not implemented by this worker`);
    }
    if (doc[name] === undefined || doc[name] === null) invalid(`${where}: ${JSON.stringify(name)} is not in the request`);
  });
}

// --- section 11.2: paths ---------------------------------------------------------------

// Why `name` breaks the path rules, or null. `glob` allows `*`, `?` and `**` components.
function pathProblem(name, glob = false) {
  if (typeof name !== 'string') return 'expected a string';
  const bytes = Buffer.byteLength(name);
  if (bytes < 1 || bytes > 1024) return 'expected 1 to 1024 bytes';
  if (LONE_SURROGATE.test(name)) return 'a lone surrogate';
  if (BAD_PATH_CHARACTER.test(name)) return 'a control, bidirectional or backslash character';
  if (name.startsWith('/')) return 'an absolute path';
  if (glob && /[[\]]/.test(name)) return '`[` and `]` are not allowed in a pattern';
  for (const part of name.split('/')) {
    if (part === '') return 'an empty component (`//` or a trailing `/`)';
    if (part === '.' || part === '..') return `a ${JSON.stringify(part)} component`;
    if (Buffer.byteLength(part) > 255) return 'a component over 255 bytes';
  }
  return null;
}

// Sameness (section 11.2): full case folding, then NFC. JavaScript has no case folding;
// upper- then lower-casing folds ASCII and the common full foldings (ß, ﬁ) alike, which
// is at least what R22 asks of a worker without one.
const fold = (name) => name.normalize('NFC').toUpperCase().toLowerCase().normalize('NFC');

function checkFiles(files) {
  if (!Array.isArray(files) || files.length > MAX_FILES) invalid(`files: expected at most ${MAX_FILES} files`);
  const seen = new Map();
  let total = 0;
  const checked = files.map((file, index) => {
    const where = `files[${index}]`;
    if (!isObject(file)) invalid(`${where}: expected an object`);
    const problem = pathProblem(file.path);
    if (problem) invalid(`${where}.path: ${problem}`);
    const key = fold(file.path);
    if (seen.has(key)) invalid(`${where}.path: the same path as files[${seen.get(key)}].path`);
    seen.set(key, index);
    if (typeof file.content !== 'string') invalid(`${where}.content: expected a string`);
    const encoding = file.encoding ?? 'utf-8';
    let data;
    if (encoding === 'utf-8') {
      if (LONE_SURROGATE.test(file.content)) invalid(`${where}.content: a lone surrogate`);
      data = Buffer.from(file.content, 'utf8');
    } else if (encoding === 'base64') {
      if (file.content.length % 4 !== 0 || !BASE64.test(file.content)) invalid(`${where}.content: not padded standard base64`);
      data = Buffer.from(file.content, 'base64');
    } else invalid(`${where}.encoding: expected "utf-8" or "base64"`);
    const mode = file.mode ?? 0o644;
    if (!isInt(mode, 0, 0o777)) invalid(`${where}.mode: expected an integer in 0..511 (no setuid, setgid or sticky bit)`);
    total += data.length;
    if (total > MAX_FILES_BYTES) invalid(`files: over ${MAX_FILES_BYTES} bytes decoded`);
    return { path: file.path, data, mode };
  });
  // A file may not be a parent directory of another (`a` and `a/b`): the write-through case.
  for (const file of checked) {
    const parts = fold(file.path).split('/');
    for (let n = 1; n < parts.length; n++) {
      const parent = parts.slice(0, n).join('/');
      if (seen.has(parent)) invalid(`files[${seen.get(parent)}].path: a parent directory of ${JSON.stringify(file.path)}`);
    }
  }
  return checked;
}

function checkCollect(collect) {
  if (!isObject(collect)) invalid('collect: expected an object');
  const { patterns } = collect;
  if (!Array.isArray(patterns) || patterns.length < 1 || patterns.length > 64) invalid('collect.patterns: expected 1 to 64 patterns');
  patterns.forEach((pattern, index) => {
    const problem = pathProblem(pattern, true);
    if (problem) invalid(`collect.patterns[${index}]: ${problem}`);
  });
  const maxFiles = collect.max_files ?? 64;
  const maxBytes = collect.max_bytes ?? 16 * 1024 * 1024;
  if (!isInt(maxFiles, 1, 1024)) invalid('collect.max_files: expected an integer in 1..1024');
  if (!isInt(maxBytes, 1, 64 * 1024 * 1024)) invalid('collect.max_bytes: expected an integer in 1..67108864');
  return { patterns: patterns.map(globRegex), maxFiles, maxBytes };
}

function checkEvents(events) {
  if (!isObject(events)) invalid('events: expected an object');
  const perSecond = events.max_per_second ?? 20;
  const maxBytes = events.max_bytes ?? 1024 * 1024;
  if (!isInt(perSecond, 1, 1000)) invalid('events.max_per_second: expected an integer in 1..1000');
  if (!isInt(maxBytes, 1, 8 * 1024 * 1024)) invalid('events.max_bytes: expected an integer in 1..8388608');
  return { perSecond, maxBytes };
}

// Section 11.4: `*` any run but `/`, `?` one character but `/`, a `**` component zero or
// more directories; a trailing `**` matches files too (section 9.1).
function globRegex(pattern) {
  const quote = (s) => s.replace(/[.+^${}()|\\]/g, '\\$&').replace(/\*/g, '[^/]*').replace(/\?/g, '[^/]');
  const parts = pattern.split('/');
  let source = '';
  parts.forEach((part, index) => {
    const last = index === parts.length - 1;
    if (part === '**') source += last ? '.+' : '(?:[^/]+/)*';
    else source += quote(part) + (last ? '' : '/');
  });
  return new RegExp(`^${source}$`, 'su');
}

// --- the workspace ---------------------------------------------------------------------

// Section 11.3: parents created here, each file created exclusively, no symbolic link
// followed. Node has no openat(), so each directory on the way is checked with lstat:
// the workspace is fresh and nothing else writes to it before the tool runs.
function writeFiles(workspace, files) {
  const { O_CREAT, O_EXCL, O_WRONLY, O_NOFOLLOW } = fs.constants;
  for (const file of files) {
    const parts = file.path.split('/');
    let dir = workspace;
    for (const part of parts.slice(0, -1)) {
      dir = path.join(dir, part);
      let stat;
      try { stat = fs.lstatSync(dir); } catch { fs.mkdirSync(dir, 0o755); continue; }
      if (!stat.isDirectory()) invalid(`files: ${JSON.stringify(file.path)} goes through something that is not a directory`);
    }
    const fd = fs.openSync(path.join(dir, parts[parts.length - 1]), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW, 0o600);
    try {
      fs.writeSync(fd, file.data);
      fs.fchmodSync(fd, file.mode);
    } finally {
      fs.closeSync(fd);
    }
  }
}

const MIME = {
  txt: 'text/plain', md: 'text/markdown', csv: 'text/csv', json: 'application/json', html: 'text/html',
  png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', svg: 'image/svg+xml', pdf: 'application/pdf',
};
const mimeOf = (name) => MIME[path.extname(name).slice(1).toLowerCase()] || 'application/octet-stream';

// Section 11.4: the regular files matching any pattern, sorted by path, never following
// a symbolic link; what matched but cannot be returned is named in one text part.
function collectFiles(workspace, collect) {
  const found = [];
  const skipped = [];
  const matches = (rel) => collect.patterns.some((re) => re.test(rel));
  const walk = (dir, prefix) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const rel = prefix + entry.name;
      if (entry.isDirectory()) walk(path.join(dir, entry.name), `${rel}/`);
      else if (!matches(rel)) continue;
      else if (entry.isFile()) found.push(rel);
      else skipped.push([rel, entry.isSymbolicLink() ? 'a symbolic link (not followed)' : 'not a regular file']);
    }
  };
  walk(workspace, '');
  const byPath = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  found.sort(byPath);
  skipped.sort((a, b) => byPath(a[0], b[0]));
  if (found.length > collect.maxFiles) throw new Refusal('LIMIT_EXCEEDED', `collect: ${found.length} files match, over max_files=${collect.maxFiles}`);
  let total = 0;
  const parts = found.map((rel) => {
    const { O_RDONLY, O_NOFOLLOW } = fs.constants;
    const fd = fs.openSync(path.join(workspace, rel), O_RDONLY | O_NOFOLLOW);
    let data;
    try { data = fs.readFileSync(fd); } finally { fs.closeSync(fd); }
    total += data.length;
    if (total > collect.maxBytes) throw new Refusal('LIMIT_EXCEEDED', `collect: over max_bytes=${collect.maxBytes}`);
    const part = { type: 'media', mime_type: mimeOf(rel), base64_data: data.toString('base64') };
    const base = path.posix.basename(rel);
    if (FILENAME.test(base)) part.filename = base;
    part.path = rel;
    return part;
  });
  if (skipped.length) parts.push({ type: 'text', content: skipped.map(([p, why]) => `skipped: ${p}: ${why}`).join('\n') });
  return parts;
}

// --- events (section 11.5) -------------------------------------------------------------

// Keeps to the request's budget: a token bucket of `max_per_second` (its burst too) and
// `max_bytes` in all; what it drops is counted in one `dropped` event at the end.
class Events {
  constructor(budget) {
    this.budget = budget;
    this.tokens = budget ? budget.perSecond : 0;
    this.last = Date.now();
    this.bytes = 0;
    this.dropped = 0;
  }

  line(event) {
    return Buffer.from(`${RS}${JSON.stringify(event)}\n`);
  }

  emit(event) {
    if (!this.budget) return;
    const now = Date.now();
    this.tokens = Math.min(this.budget.perSecond, this.tokens + ((now - this.last) / 1000) * this.budget.perSecond);
    this.last = now;
    const line = this.line(event);
    if (this.tokens < 1 || line.length > MAX_EVENT_LINE || this.bytes + line.length > this.budget.maxBytes) {
      this.dropped++;
      return;
    }
    this.tokens -= 1;
    this.bytes += line.length;
    fs.writeSync(2, line);
  }

  close() {
    if (this.budget && this.dropped) fs.writeSync(2, this.line({ type: 'dropped', count: this.dropped }));
  }
}

// --- tools -------------------------------------------------------------------------------

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

function describe(version) {
  return {
    kind: 'DescribeResult',
    version,
    worker: WORKER,
    supported_versions: SUPPORTED,
    ...(version === '1.1' ? { capabilities: CAPABILITIES } : {}), // a 1.0 answer is closed
    tools: Object.entries(TOOLS).map(([name, t]) => ({
      name, description: t.description, input_schema: t.input_schema, effects: t.effects,
    })),
  };
}

// One call in its own workspace: files in, the tool, files out.
function call(doc, tool) {
  const events = new Events(doc.events);
  const workspace = fs.mkdtempSync(path.join(os.tmpdir(), 'example-node-files-'));
  try {
    if (doc.files) {
      writeFiles(workspace, doc.files);
      events.emit({ type: 'progress', fraction: 0.25, message: `wrote ${doc.files.length} input files` });
    }
    const output = tool.run(doc.arguments, doc, workspace);
    events.emit({ type: 'log', stream: 'stdout', text: `${doc.tool.name} done` });
    if (!doc.collect) return output;
    const parts = [...(output.type === 'mixed' ? output.parts : [output]), ...collectFiles(workspace, doc.collect)];
    if (parts.length > MAX_PARTS) throw new Refusal('LIMIT_EXCEEDED', `the output would have ${parts.length} parts, over ${MAX_PARTS}`);
    events.emit({ type: 'progress', fraction: 1, message: `collected ${parts.length - 1} parts` });
    return { type: 'mixed', parts };
  } finally {
    events.close();
    fs.rmSync(workspace, { recursive: true, force: true });
  }
}

function handle(bytes) {
  let id = RESERVED_ID;
  let version = HIGHEST; // a refusal before the version is read (section 8.2)
  const fail = (err) => ({
    kind: 'ToolCallResult', version, id, status: 'error',
    error: { code: err.code, message: err.message.slice(0, 4096), retryable: err.retryable },
  });
  try {
    const doc = decodeRequest(bytes);
    if (typeof doc.id === 'string' && ID.test(doc.id)) id = doc.id;
    // Section 8.1's order: kind, then the version's grammar, then whether it is spoken.
    if (doc.kind !== 'ToolCallRequest' && doc.kind !== 'DescribeRequest') {
      throw new Refusal('INVALID_REQUEST', 'kind: expected ToolCallRequest or DescribeRequest');
    }
    if (typeof doc.version !== 'string' || !VERSION.test(doc.version)) {
      throw new Refusal('INVALID_REQUEST', 'version: missing or not a version (major.minor, no leading zeros)');
    }
    if (!SUPPORTED.includes(doc.version)) {
      throw new Refusal('UNSUPPORTED_VERSION', `version ${JSON.stringify(doc.version)} is not supported; supported versions: ${SUPPORTED.join(', ')}`);
    }
    version = doc.version;
    if (doc.kind === 'DescribeRequest') {
      id = RESERVED_ID; // a describe has no id
      return describe(version);
    }
    checkRequest(doc);
    log(`call ${id}: tool ${doc.tool.name}`);
    const tool = Object.hasOwn(TOOLS, doc.tool.name) ? TOOLS[doc.tool.name] : undefined;
    if (!tool) throw new Refusal('UNKNOWN_TOOL', `no tool ${JSON.stringify(doc.tool.name)}; this worker has: ${Object.keys(TOOLS).join(', ')}`);
    checkArguments(tool.input_schema, doc.arguments);
    if (Date.now() >= doc.deadline_ms) throw new Refusal('DEADLINE_EXCEEDED', 'the deadline passed before the tool ran', true);
    const result = { kind: 'ToolCallResult', version, id, status: 'ok', output: call(doc, tool) };
    const size = Buffer.byteLength(JSON.stringify(result));
    if (size > doc.limits.max_result_bytes) {
      throw new Refusal('LIMIT_EXCEEDED', `result is ${size} bytes, over max_result_bytes=${doc.limits.max_result_bytes}`);
    }
    return result;
  } catch (err) {
    if (err instanceof Refusal) return fail(err);
    process.stderr.write(`example-node-files: internal error: ${err && err.stack}\n`);
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
