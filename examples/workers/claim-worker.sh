#!/usr/bin/env bash
# claim-worker.sh: a claimer for agents-runner's claim protocol (docs/claims.md),
# in bash with curl and jq. It long-polls `POST /v1/claims` for deferred calls of the
# tools it serves, runs each call's handler, heartbeats while the handler runs, and
# completes the claim with the handler's result (or fails it when the handler fails).
#
#   AGENTS_RUNNER_URL=http://127.0.0.1:8080 AGENTS_RUNNER_TOKEN=... \
#   CLAIM_TOOLS=fetch_remote_a CLAIM_HANDLER='jq -c "{echo: .}"' \
#   bash examples/workers/claim-worker.sh
#
# Environment:
#   AGENTS_RUNNER_URL    the server (default http://127.0.0.1:8080)
#   AGENTS_RUNNER_TOKEN  a bearer token granted those tools (none for `serve --no-auth`)
#   CLAIM_TOOLS          the tools to claim, comma-separated (required)
#   CLAIM_HANDLER        run per call with `bash -c`: the call's arguments (JSON) on stdin;
#                        stdout is the result (JSON if it parses as one value, else text);
#                        a non-zero exit fails the call with stderr's tail as the reason.
#                        It sees CLAIM_TOOL, CLAIM_SESSION_ID, CLAIM_TOOL_CALL_ID,
#                        CLAIM_IDEMPOTENCY_KEY, CLAIM_TOKEN and CLAIM_LEASE_EXPIRES_MS.
#                        Default: echo the arguments back as {"echo": ARGUMENTS}.
#   CLAIM_LEASE_SECONDS  each claim's lease, whole seconds (default 30); the claimer
#                        heartbeats every third of it while the handler runs
#   CLAIM_WAIT_SECONDS   the long poll's wait (default 20)
#   CLAIM_MAX_CALLS      exit after handling this many calls (default 0: no limit)
#   CLAIM_STOP_FILE      exit (between calls) once this file exists; SIGTERM does the same
#
# stdout: one JSON line per call handled, {"claim", "session_id", "tool_call_id", "tool",
# "outcome": "completed"|"failed"|"dropped", "answer"}; stderr: the log. Exit 0 when told
# to stop or after CLAIM_MAX_CALLS; 1 for a setup error; 2 when the server refuses the
# token (401, 403) or the request (422).
set -uo pipefail
export LC_ALL=C.UTF-8

URL="${AGENTS_RUNNER_URL:-http://127.0.0.1:8080}"
TOKEN="${AGENTS_RUNNER_TOKEN:-}"
HANDLER="${CLAIM_HANDLER:-jq -c '{echo: .}'}"
LEASE="${CLAIM_LEASE_SECONDS:-30}"
WAIT="${CLAIM_WAIT_SECONDS:-20}"
MAX_CALLS="${CLAIM_MAX_CALLS:-0}"
STOP_FILE="${CLAIM_STOP_FILE:-}"

log() { printf 'claim-worker: %s\n' "$*" >&2; }
die() { log "$1"; exit "${2:-1}"; }

for tool in jq curl; do
    command -v "$tool" >/dev/null 2>&1 || die "needs $tool on PATH"
done
[ -n "${CLAIM_TOOLS:-}" ] || die "set CLAIM_TOOLS to the tools to claim (comma-separated)"
[[ "$LEASE" =~ ^[0-9]+$ ]] && [ "$LEASE" -ge 1 ] || die "CLAIM_LEASE_SECONDS: whole seconds >= 1"
[[ "$WAIT" =~ ^[0-9]+$ ]] || die "CLAIM_WAIT_SECONDS: whole seconds >= 0"
[[ "$MAX_CALLS" =~ ^[0-9]+$ ]] || die "CLAIM_MAX_CALLS: a count >= 0"
TOOLS_JSON=$(jq -cn --arg tools "$CLAIM_TOOLS" '$tools | split(",") | map(select(. != ""))')
BEAT_US=$((LEASE * 1000000 / 3))

WORK=$(mktemp -d) || die "cannot make a temporary directory"
trap 'rm -rf "$WORK"' EXIT
stopping=""
trap 'stopping=1; log "stopping after the current call"' TERM INT

# post PATH BODY: POST a JSON body; sets STATUS (the HTTP status, 000 when the server is
# unreachable) and leaves the answer in $WORK/answer.
post() {
    local auth=()
    [ -n "$TOKEN" ] && auth=(-H "Authorization: Bearer $TOKEN")
    STATUS=$(printf '%s' "$2" | curl -sS -o "$WORK/answer" -w '%{http_code}' \
        --max-time $((WAIT + 30)) -X POST -H 'Content-Type: application/json' "${auth[@]}" \
        --data-binary @- "$URL$1" 2>"$WORK/curl.err") || STATUS=000
}

# problem: the answer's problem type (claim_superseded, ...) and detail, for the log.
problem() { jq -r '"\(.type // "" | sub("^urn:agents-runner:problem:"; "")): \(.detail // .)"' \
    "$WORK/answer" 2>/dev/null || cat "$WORK/answer"; }

refused() {  # the server will not take this token or request: no retry can help
    case "$STATUS" in
        401 | 403 | 422) die "the server refused: HTTP $STATUS $(problem)" 2 ;;
    esac
}

now_us() { echo "${EPOCHREALTIME/./}"; }

# heartbeat CLAIM: extend the lease. Prints what to do next: keep, lapsed (keep working,
# the result still settles the call) or drop (re-claimed, or the call ended).
heartbeat() {
    post "/v1/claims/$1/heartbeat" "{\"lease_seconds\": $LEASE}"
    case "$STATUS" in
        200) echo keep ;;
        409)
            log "heartbeat $1: $(problem)"
            if jq -e '.type | endswith(":claim_lapsed")' "$WORK/answer" >/dev/null 2>&1; then
                echo lapsed
            else
                echo drop
            fi ;;
        *) log "heartbeat $1: HTTP $STATUS $(problem) (trying again)"; echo keep ;;
    esac
}

# report CLAIM ENTRY OUTCOME: the line on stdout for one call.
report() {
    jq -cn --argjson entry "$2" --arg claim "$1" --arg outcome "$3" \
        --argjson answer "$(jq -c . "$WORK/answer" 2>/dev/null || echo null)" \
        '{claim: $claim, session_id: $entry.session_id, tool_call_id: $entry.tool_call_id,
          tool: $entry.tool, outcome: $outcome, answer: $answer}'
}

# run_call ENTRY: one claimed call, from handler to complete or fail.
run_call() {
    local entry="$1" claim field
    claim=$(jq -r .claim <<<"$entry")
    log "claimed $claim: $(jq -r '"\(.tool) (call \(.tool_call_id) of \(.session_id))"' <<<"$entry")"
    jq -c .arguments <<<"$entry" >"$WORK/arguments"
    (
        for field in tool session_id tool_call_id idempotency_key lease_expires_ms; do
            export "CLAIM_${field^^}=$(jq -r ".$field" <<<"$entry")"
        done
        export CLAIM_TOKEN="$claim"
        exec bash -c "$HANDLER" <"$WORK/arguments" >"$WORK/out" 2>"$WORK/err"
    ) &
    local pid=$! next=$(($(now_us) + BEAT_US)) verdict=keep
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$verdict" = keep ] && [ "$(now_us)" -ge "$next" ]; then
            verdict=$(heartbeat "$claim")
            next=$(($(now_us) + BEAT_US))
            if [ "$verdict" = drop ]; then
                kill "$pid" 2>/dev/null
                wait "$pid" 2>/dev/null
                report "$claim" "$entry" dropped
                return
            fi
        fi
        sleep 0.1
    done
    wait "$pid"
    local code=$? body
    if [ "$code" -eq 0 ]; then
        # One JSON value is the result as it is; anything else is sent as text.
        body=$(jq -cs 'if length == 1 then {result: .[0]} else error("not one value") end' \
            "$WORK/out" 2>/dev/null) || body=$(jq -Rsc '{result: .}' "$WORK/out")
        post "/v1/claims/$claim/complete" "$body"
        outcome=completed
        if [ "$STATUS" = 422 ]; then  # not a result the server takes: say so instead
            log "complete $claim: $(problem)"
            body=$(problem | jq -Rsc '{reason: "the handler produced an invalid result: \(.)"}')
            post "/v1/claims/$claim/fail" "$body"
            outcome=failed
        fi
    else
        body=$(tail -c 2000 "$WORK/err" | jq -Rsc --arg code "$code" \
            '{reason: (if . == "" then "the handler exited with status \($code)" else . end)}')
        post "/v1/claims/$claim/fail" "$body"
        outcome=failed
    fi
    case "$STATUS" in
        401 | 403) die "the server refused: HTTP $STATUS $(problem)" 2 ;;
        200) log "$outcome $claim: $(jq -r .status "$WORK/answer")" ;;
        *) log "$outcome $claim: HTTP $STATUS $(problem)"; outcome=dropped ;;
    esac
    report "$claim" "$entry" "$outcome"
}

handled=0
request=$(jq -cn --argjson tools "$TOOLS_JSON" --argjson lease "$LEASE" --argjson wait "$WAIT" \
    '{tools: $tools, lease_seconds: $lease, wait_seconds: $wait, max: 1}')
log "claiming $(jq -r 'join(", ")' <<<"$TOOLS_JSON") from $URL"
while :; do
    if [ -n "$stopping" ] || { [ -n "$STOP_FILE" ] && [ -e "$STOP_FILE" ]; }; then
        log "stopped after $handled call(s)"
        exit 0
    fi
    if [ "$MAX_CALLS" -gt 0 ] && [ "$handled" -ge "$MAX_CALLS" ]; then
        log "handled $handled call(s): done"
        exit 0
    fi
    post /v1/claims "$request"
    refused
    if [ "$STATUS" != 200 ]; then
        log "claiming: HTTP $STATUS $(problem) $(cat "$WORK/curl.err")(again in 1s)"
        sleep 1
        continue
    fi
    entry=$(jq -c '.claims[0] // empty' "$WORK/answer")
    if [ -n "$entry" ]; then
        run_call "$entry"
        handled=$((handled + 1))
    fi
done
