#!/bin/bash
# Example worker in agents-exe's isolation envelope (bash + jq): tools `echo` and `add`.
#
#   bash examples/workers/agents-exe/worker.sh < envelope.json
#
# Written the way agents-exe's workers are, and run unchanged by agents-runner when the
# isolation spec says "envelope": "agents-exe" (docs/envelope-v1.md, section 10). Stdin
# holds one JSON object, stdin is then closed:
#   {"token": "<uuid>",
#    "toolCall": {"id", "type": "function", "function": {"name", "arguments"}},
#    "contextSnapshot": {...}, "policy": {"tag": "runIsolated", "spec": {...}}, "reason"?}
# `arguments` is JSON text, as the OpenAI API sends it (an object is accepted as well).
# Stdout gets one JSON object, and the exit status is 0 whatever the tool did:
#   {"token": "<the same>", "status": "success", "result": <a UserToolResponse>}
#   {"token": "<the same>", "status": "error", "error": "<why>"}
# Input without a token cannot be answered: the worker says so on stderr and exits 2.
# Logs go to stderr (verbose with AGENTS_RUNNER_LOG_LEVEL=debug).
set -uo pipefail
export LC_ALL=C.UTF-8

log() {
    if [ "${AGENTS_RUNNER_LOG_LEVEL:-}" = debug ]; then printf 'example-agents-exe: %s\n' "$*" >&2; fi
}

envelope=$(head -c $((16 * 1024 * 1024)))
if ! token=$(jq -er '.token | strings' <<<"$envelope" 2>/dev/null); then
    printf 'example-agents-exe: stdin is not an isolation envelope with a token\n' >&2
    exit 2
fi
log "call $(jq -r '.toolCall.function.name // "?"' <<<"$envelope") for token $token"

ANSWER='
def success($result): {token: .token, status: "success", result: $result};
def failure($why): {token: .token, status: "error", error: $why};
def number_or_null: if type == "number" then . else null end;
.toolCall.function as $call
| ($call.arguments | if type == "string" then (try fromjson catch null) else . end) as $args
| if ($call.name | type) != "string" then failure("toolCall.function.name: missing")
  elif ($args | type) != "object" then failure("arguments: expected a JSON object")
  elif $call.name == "echo" then
    if ($args.text | type) == "string" then success({type: "text", content: $args.text})
    else failure("echo needs `text`, a string") end
  elif $call.name == "add" then
    if ($args.a | number_or_null) != null and ($args.b | number_or_null) != null
    then success({type: "json", content: {sum: ($args.a + $args.b)}})
    else failure("add needs `a` and `b`, numbers") end
  else failure("unknown tool \($call.name[0:64] | tojson); this worker has echo and add")
  end'
if ! jq -c "$ANSWER" <<<"$envelope"; then
    # jq itself failed: still an answer the runner can match to the call.
    jq -cn --arg token "$token" '{token: $token, status: "error", error: "the worker failed"}'
fi
exit 0
