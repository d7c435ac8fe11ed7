#!/bin/bash
# Example worker in bash with jq: `echo` and `ledger_append`, envelope v1.
#
#   bash examples/workers/bash/worker.sh < request.json
#
# jq alone is too lenient for a worker (it reads NaN, keeps the last of duplicate keys,
# replaces invalid UTF-8), so the request goes through three gates before it is used:
# a BOM and UTF-8 check (iconv), jq's own parse (grammar, surrogates, depth), and
# STRICT below, which tokenizes the text to refuse duplicate keys, non-JSON literals,
# unsafe integers and nesting deeper than 64. Logs go to stderr (verbose with
# AGENTS_RUNNER_LOG_LEVEL=debug); stdout carries exactly one JSON document; exit 0 with
# "ok", 1 with "error".
set -uo pipefail
export LC_ALL=C.UTF-8

MAX_REQUEST_BYTES=$((16 * 1024 * 1024))

log() {
    if [ "${AGENTS_RUNNER_LOG_LEVEL:-}" = debug ]; then printf 'example-bash: %s\n' "$*" >&2; fi
}

# refuse CODE MESSAGE [ID] [VERSION] [RETRYABLE]: write an error result and exit 1; without
# an id it answers the reserved id "-" (section 8.2), which no request can carry.
refuse() {
    jq -cjn --arg code "$1" --arg message "$2" --arg id "${3:--}" --arg v "${4:-1.0}" \
        --argjson retryable "${5:-false}" \
        '{kind: "ToolCallResult", version: $v, id: $id, status: "error",
          error: {code: $code, message: $message[0:4096], retryable: $retryable}}'
    exit 1
}

workdir=$(mktemp -d) || { printf 'example-bash: no temporary directory\n' >&2; exit 70; }
trap 'rm -rf "$workdir"' EXIT
request=$workdir/request.json
head -c $((MAX_REQUEST_BYTES + 1)) >"$request"

# --- gate 1: bytes ---------------------------------------------------------------------
[ "$(stat -c %s "$request")" -le "$MAX_REQUEST_BYTES" ] || refuse INVALID_REQUEST "request over 16 MiB"
[ -n "$(tr -d ' \t\r\n' <"$request" | head -c 1)" ] \
    || refuse INVALID_REQUEST "empty input: expected one JSON object"
[ "$(head -c 3 "$request" | od -An -tx1 | tr -d ' \n')" != efbbbf ] \
    || refuse INVALID_REQUEST "input starts with a byte order mark; send plain UTF-8"
iconv -f UTF-8 -t UTF-8 "$request" >/dev/null 2>&1 || refuse INVALID_REQUEST "request is not valid UTF-8"

# --- gates 2 and 3: jq's parse, then the token check -----------------------------------
STRICT='
def fail($why): error("request is not acceptable JSON: " + $why);
def safe_integer: ltrimstr("-") | length < 16 or (length == 16 and . <= "9007199254740991");
. as $text
| ($text | fromjson) as $doc
| if ($doc | type) != "object" then fail("expected a JSON object") else . end
| [$text | scan("\"[^\"\\\\\\x00-\\x1f]*(?:\\\\.[^\"\\\\\\x00-\\x1f]*)*\"|[{}\\[\\]:,]|[ \\t\\r\\n]+|[^{}\\[\\]:,\" \\t\\r\\n]+|.")
   | select(test("^[ \\t\\r\\n]+$") | not)] as $tokens
| reduce range(0; $tokens | length) as $i ([];
    $tokens[$i] as $t
    | if $t == "{" or $t == "[" then
        if length >= 64 then fail("nesting deeper than 64 levels") else . + [{}] end
      elif $t == "}" or $t == "]" then .[:-1]
      elif ($t | startswith("\"")) then
        if $tokens[$i + 1] == ":" then
          ($t | fromjson) as $key
          | if .[-1] | has($key) then fail("duplicate key \($key[0:40] | tojson)")
            else .[-1][$key] = true end
        else . end
      elif $t == ":" or $t == "," or $t == "true" or $t == "false" or $t == "null" then .
      elif ($t | test("^-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?$") | not) then
        fail("\($t[0:20] | tojson) is not a JSON value")
      elif ($t | test("^-?[0-9]+$")) and ($t | safe_integer | not) then
        fail("integer \($t[0:24]) is outside +-(2^53-1)")
      else . end)
| $doc'
if ! doc=$(jq -R -s -c "$STRICT" "$request" 2>&1); then
    # jq's message repeats the whole input after "(while parsing": keep the reason only.
    reason=${doc#*): }
    reason=${reason%% (while parsing*}
    # Unacceptable JSON has no id to read (section 8.2): the answer carries the reserved "-".
    refuse INVALID_REQUEST "request is not acceptable JSON: ${reason#request is not acceptable JSON: }"
fi

# --- the envelope ----------------------------------------------------------------------
ENVELOPE='
def answer($result): {answer: $result};
def refuse($id; $v; $code; $message; $retryable):
  answer({kind: "ToolCallResult", version: $v, id: $id, status: "error",
          error: {code: $code, message: $message[0:4096], retryable: $retryable}});
def text_arg($name; $max): {type: "object", properties: {($name): {type: "string", maxLength: $max}},
                            required: [$name], additionalProperties: false};
def tools: [
  {name: "echo", description: "Return the given text unchanged.", effects: "none",
   input_schema: text_arg("text"; 65536)},
  {name: "ledger_append", effects: "external",
   description: "Append an entry to the ledger, at most once per idempotency key.",
   input_schema: text_arg("entry"; 4096)}];
def id_ok: type == "string" and test("^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$");
def int_in($lo; $hi): type == "number" and . == floor and . >= $lo and . <= $hi;
def problem:
  if (.id | id_ok | not) then "id: missing or not an identifier"
  elif (.tool | type) != "object" or (.tool.name | type) != "string"
       or (.tool.name | test("^[A-Za-z][A-Za-z0-9_.-]{0,63}$") | not) then "tool.name: missing or invalid"
  elif (.arguments | type) != "object" then "arguments: expected an object"
  elif (.deadline_ms | int_in(0; 9007199254740991) | not) then "deadline_ms: expected an integer"
  elif (.limits | type) != "object" or (.limits.max_result_bytes | int_in(1; 67108864) | not)
    then "limits.max_result_bytes: expected an integer in 1..67108864"
  elif (.context | type) as $c | $c != "null" and $c != "object" then "context: expected an object"
  elif (.context.idempotency_key | type) as $k | $k != "null" and $k != "string"
    then "context.idempotency_key: expected a string"
  elif (.extensions | type) as $e | $e != "null" and $e != "object"
    then "extensions: expected an object"
  elif [.extensions // {} | keys[] | select(length > 1024 or
         (test("^[a-z][a-z0-9-]*(\\.[a-z0-9-]+)*/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$") | not))] | length > 0
    then "extensions: a key that is not vendor.domain/name"
  else null end;
def argument_problem($schema):
  ($schema.properties | keys[0]) as $name
  | if (.arguments | keys - [$name] | length) > 0
      then "arguments: unexpected property \(.arguments | keys - [$name] | .[0][0:64] | tojson)"
    elif (.arguments | has($name) | not) then "arguments: \($name | tojson) is required"
    elif (.arguments[$name] | type) != "string" then "arguments[\u0027\($name)\u0027]: the value is not of type \u0027string\u0027"
    elif (.arguments[$name] | length) > $schema.properties[$name].maxLength
      then "arguments[\u0027\($name)\u0027]: longer than \($schema.properties[$name].maxLength) characters"
    else null end;
. as $request
| (if .id | id_ok then .id else "-" end) as $id
| if .kind != "ToolCallRequest" and .kind != "DescribeRequest" then
    refuse($id; "1.0"; "INVALID_REQUEST"; "kind: expected ToolCallRequest or DescribeRequest"; false)
  elif (.version | type) != "string" or (.version | test("^(0|[1-9][0-9]{0,3})\\.(0|[1-9][0-9]{0,3})$") | not) then
    refuse($id; "1.0"; "INVALID_REQUEST"; "version: missing or not a version (major.minor, no leading zeros)"; false)
  elif .version != "1.0" then
    refuse($id; "1.0"; "UNSUPPORTED_VERSION";
           "version \(.version[0:16] | tojson) is not supported; supported versions: 1.0"; false)
  elif .kind == "DescribeRequest" then
    answer({kind: "DescribeResult", version: "1.0", worker: {name: "example-bash", version: "1.0.0"},
            supported_versions: ["1.0"], tools: tools})
  elif problem != null then
    refuse($id; .version; "INVALID_REQUEST"; "invalid ToolCallRequest: \(problem)"; false)
  else
    .tool.name as $name
    | (tools | map(select(.name == $name)) | .[0]) as $tool
    | if $tool == null then
        refuse($id; .version; "UNKNOWN_TOOL";
               "no tool \($name[0:64] | tojson); this worker has: echo, ledger_append"; false)
      elif argument_problem($tool.input_schema) != null then
        refuse($id; .version; "INVALID_ARGUMENTS"; argument_problem($tool.input_schema); false)
      elif $now_ms >= .deadline_ms then
        refuse($id; .version; "DEADLINE_EXCEEDED"; "the deadline passed before the tool ran"; true)
      elif $name == "echo" then
        answer({kind: "ToolCallResult", version: .version, id: $id, status: "ok",
                output: {type: "text", content: .arguments.text}})
      else
        {ledger: {key: .context.idempotency_key, entry: .arguments.entry}}
      end
  end
| .max_result_bytes = $request.limits.max_result_bytes'
now_ms=$(date +%s%3N)
step=$(jq -c --argjson now_ms "$now_ms" "$ENVELOPE" <<<"$doc") \
    || refuse INTERNAL "the envelope step failed"
id=$(jq -r '.answer.id // empty' <<<"$step")
log "request ${id:-(ledger)} handled: $(jq -r 'keys[0]' <<<"$step")"

# ledger_append: an external effect, made idempotent: one line per key, ever.
if jq -e 'has("ledger")' <<<"$step" >/dev/null; then
    call_id=$(jq -r .id <<<"$doc")
    key=$(jq -r '.ledger.key // empty' <<<"$step")
    [ -n "$key" ] || refuse TOOL_FAILED "ledger_append needs context.idempotency_key" "$call_id"
    ledger=${LEDGER_FILE:-${TMPDIR:-/tmp}/ledger.jsonl}
    record=""
    if [ -f "$ledger" ]; then
        record=$(jq -c --arg k "$key" 'select(.idempotency_key == $k) | .appended = false' "$ledger" \
            | head -n 1) || refuse UNAVAILABLE "the ledger cannot be read" "$call_id" 1.0 true
    fi
    if [ -z "$record" ]; then
        line=$(jq -cn --arg k "$key" --argjson step "$step" '{idempotency_key: $k, entry: $step.ledger.entry}')
        printf '%s\n' "$line" >>"$ledger" 2>/dev/null \
            || refuse UNAVAILABLE "the ledger cannot be written" "$call_id" 1.0 true
        record=$(jq -c '.appended = true' <<<"$line")
    fi
    step=$(jq -c --arg id "$call_id" --argjson record "$record" \
        '{answer: {kind: "ToolCallResult", version: "1.0", id: $id, status: "ok",
                   output: {type: "json", content: $record}}, max_result_bytes: .max_result_bytes}' \
        <<<"$step")
fi

answer=$(jq -cj '.answer' <<<"$step")
max=$(jq -r '.max_result_bytes // empty' <<<"$step")
if [ -n "$max" ] && [ "$(printf '%s' "$answer" | wc -c)" -gt "$max" ]; then
    refuse LIMIT_EXCEEDED "result is $(printf '%s' "$answer" | wc -c) bytes, over max_result_bytes=$max" \
        "$(jq -r .answer.id <<<"$step")"
fi
printf '%s' "$answer"
[ "$(jq -r '.answer.status // "ok"' <<<"$step")" = ok ] || exit 1
exit 0
