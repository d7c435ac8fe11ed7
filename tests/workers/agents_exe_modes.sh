#!/bin/bash
# A worker in agents-exe's isolation envelope that behaves as its one argument says, for
# the runner tests (local process and Docker):
#
#   bash tests/workers/agents_exe_modes.sh MODE < envelope.json
#
# envelope: answers with the envelope it read, as JSON content (what the worker saw)
# no_token, wrong_token, garbage, unknown_status, no_result, plain_result, extra_field,
# duplicate_keys, exit_1: answers that are not acceptable, one way each
# hang: never answers; flood: writes stdout without end
set -uo pipefail
mode=${1:?a mode}
envelope=$(cat)
token=$(jq -r '.token' <<<"$envelope")
text='{"type":"text","content":"hi"}'
case $mode in
envelope) jq -c '{token: .token, status: "success", result: {type: "json", content: .}}' \
    <<<"$envelope" ;;
no_token) printf '{"status":"success","result":%s}\n' "$text" ;;
wrong_token) printf '{"token":"%s","status":"success","result":%s}\n' \
    00000000-0000-4000-8000-000000000000 "$text" ;;
garbage) printf 'Traceback (most recent call last): not an envelope\n' ;;
unknown_status) printf '{"token":"%s","status":"done","result":%s}\n' "$token" "$text" ;;
no_result) printf '{"token":"%s","status":"success"}\n' "$token" ;;
plain_result) printf '{"token":"%s","status":"success","result":"hi"}\n' "$token" ;;
extra_field) printf '{"token":"%s","status":"success","result":%s,"debug":1}\n' "$token" "$text" ;;
duplicate_keys) printf '{"token":"%s","token":"%s","status":"success","result":%s}\n' \
    "$token" "$token" "$text" ;;
exit_1)
    printf '{"token":"%s","status":"success","result":%s}\n' "$token" "$text"
    exit 1
    ;;
hang) exec sleep 600 ;;
flood) exec yes '{"token":"flood"}' ;;
*)
    printf 'agents_exe_modes: unknown mode %s\n' "$mode" >&2
    exit 64
    ;;
esac
exit 0
