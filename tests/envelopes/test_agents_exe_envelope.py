"""agents-exe's isolation envelope: the request built from a v1 one, field for field, the
strict reading of its result envelope into a v1 result, and the examples of the spec's
compatibility section, checked against both."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from envelopes.agents_exe import (
    NIL_UUID,
    POLICY_EXTENSION,
    REASON_EXTENSION,
    TURN_EXTENSION,
    as_uuid,
    decode_result,
    docker_policy,
    encode_request,
    local_process_policy,
)
from envelopes.codec import MalformedOutput
from envelopes.v1 import CallContext, RequestLimits, ToolCallRequest
from tests.conftest import REPO

TOKEN = "5b0e1d7c-2f7a-4c1e-9d59-0c2a3f6b8e11"
SESSION_UUID = "0d9f6c1e-7e4b-4c39-9a57-6d1b2f3e4a5c"


@pytest.fixture
def request_(request_model: ToolCallRequest) -> ToolCallRequest:
    context = CallContext(session_id=f"s-{SESSION_UUID}", call_id="call_abc", attempt=1)
    return request_model.model_copy(update={"id": TOKEN, "context": context})


def sent(request: ToolCallRequest, policy: dict | None = None) -> dict:
    raw = encode_request(request, policy or local_process_policy("./worker.sh"))
    assert b"\n" not in raw  # one compact line, as aeson's encode writes it
    return json.loads(raw)


def answer(**fields: object) -> bytes:
    return json.dumps({"token": TOKEN, **fields}).encode()


def test_the_request_has_agents_exe_fields_and_nothing_of_v1(request_) -> None:
    doc = sent(request_)
    assert set(doc) == {"token", "toolCall", "contextSnapshot", "policy"}
    assert doc["token"] == TOKEN
    assert doc["toolCall"] == {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "echo", "arguments": '{"text":"hi"}'},
    }
    assert json.loads(doc["toolCall"]["function"]["arguments"]) == {"text": "hi"}
    assert doc["policy"] == {"tag": "runIsolated", "spec": {"tag": "localProcess",
                                                             "path": "./worker.sh"}}  # fmt: skip
    assert doc["contextSnapshot"] == {
        "tecsSessionId": SESSION_UUID,
        "tecsConversationId": SESSION_UUID,
        "tecsTurnId": NIL_UUID,
        "tecsCallStack": [],
        "tecsAllowedTools": [],
        "tecsParentConversation": None,
        "tecsParams": {},
    }


def test_the_extensions_give_the_policy_the_reason_and_the_turn(request_) -> None:
    policy = docker_policy("agents-runner/example-agents-exe:latest")
    extensions = {POLICY_EXTENSION: policy, REASON_EXTENSION: "untrusted", TURN_EXTENSION: 3}
    doc = sent(request_.model_copy(update={"extensions": extensions}))
    assert doc["policy"] == {"tag": "runIsolated", "spec": {"tag": "docker",
                             "image": "agents-runner/example-agents-exe:latest"}}  # fmt: skip
    assert doc["reason"] == "untrusted"
    turn = doc["contextSnapshot"]["tecsTurnId"]
    assert turn != NIL_UUID and uuid.UUID(turn)
    again = sent(request_.model_copy(update={"extensions": {**extensions, TURN_EXTENSION: 4}}))
    assert again["contextSnapshot"]["tecsTurnId"] != turn


def test_a_policy_extension_that_is_not_a_disposition_is_refused(request_) -> None:
    with pytest.raises(ValueError, match="agents-exe/policy: expected a disposition"):
        encode_request(request_.model_copy(update={"extensions": {POLICY_EXTENSION: [1]}}), {})


def test_identifiers_become_the_uuids_agents_exe_parses() -> None:
    assert as_uuid(SESSION_UUID) == as_uuid(f"s-{SESSION_UUID}") == SESSION_UUID
    derived = as_uuid("my-session")
    assert uuid.UUID(derived) and derived == as_uuid("my-session") != as_uuid("other")
    assert as_uuid(None) == NIL_UUID


@pytest.mark.parametrize(
    ("result", "output"),
    [
        ({"type": "text", "content": "42"}, {"type": "text", "content": "42"}),
        ({"type": "json", "content": {"sum": 5}}, {"type": "json", "content": {"sum": 5}}),
        ({"type": "media", "mimeType": "image/png", "base64Data": "iVBO"},
         {"type": "media", "mime_type": "image/png", "base64_data": "iVBO"}),
        ({"type": "mixed", "parts": [{"type": "text", "text": "a"}]},
         {"type": "mixed", "parts": [{"type": "text", "content": "a"}]}),
    ],
)  # fmt: skip
def test_success_is_an_ok_result_with_the_response_as_output(request_, result, output) -> None:
    decoded = decode_result(answer(status="success", result=result, error=None), request_)
    assert decoded.status == "ok" and decoded.id == TOKEN
    assert decoded.output is not None and decoded.output.to_wire() == output


def test_error_is_a_tool_failure_with_the_workers_text(request_) -> None:
    decoded = decode_result(answer(status="error", error="disk full", result=None), request_)
    assert decoded.status == "error" and decoded.error is not None
    assert (decoded.error.code, decoded.error.message) == ("TOOL_FAILED", "disk full")
    assert decoded.error.retryable is False
    bare = decode_result(answer(status="error"), request_)
    assert bare.error is not None and "without a message" in bare.error.message
    roomy = request_.model_copy(update={"limits": RequestLimits(max_result_bytes=1 << 20)})
    long = decode_result(answer(status="error", error="x" * 100_000), roomy)
    assert long.error is not None and len(long.error.message) == 64 * 1024


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"status":"success","result":{"type":"text","content":"hi"}}', "token: missing"),
        (answer(status="success").replace(TOKEN.encode(), b"another"), "token: expected"),
        (b'{"token":7,"status":"error"}', "token: expected a string"),
        (b"Traceback: not JSON", "invalid JSON"),
        (answer(status="done", result={"type": "text", "content": "hi"}), "status"),
        (answer(status="success"), "needs a result"),
        (answer(status="success", result="hi"), "expected an object whose type"),
        (answer(status="success", result={"type": "text", "content": 4}), "content"),
        (answer(status="success", result={"type": "text", "content": "a"}, error="b"),
         "must not carry an error"),
        (answer(status="error", error="b", result={"type": "text", "content": "a"}),
         "must not carry a result"),
        (answer(status="error", error=5), "error: Input should be a valid string"),
        (answer(status="error", error="b", debug=True), "unknown field 'debug'"),
        (f'{{"token":"{TOKEN}","token":"{TOKEN}","status":"error"}}'.encode(), "duplicate key"),
        (answer(status="error", error="\udcff"), "lone surrogate"),
        (b'{"token":"' + TOKEN.encode() + b'","status":"error","error":"\xff"}', "UTF-8"),
        (answer(status="error", error="x" * 70_000), "over the cap"),
    ],
)  # fmt: skip
def test_anything_else_is_malformed_output(request_, data, reason) -> None:
    with pytest.raises(MalformedOutput, match=reason):
        decode_result(data, request_)


# --- the examples of docs/envelope-v1.md, section 10 ------------------------------------


def section_10_blocks(language: str) -> list[dict]:
    text = (REPO / "docs" / "envelope-v1.md").read_text(encoding="utf-8")
    section = text.split("## 10. Compatibility mode")[1].split("\n## 11. ")[0]
    pattern = rf"^```{language}\n(.*?)^```"
    return [json.loads(b) for b in re.findall(pattern, section, re.DOTALL | re.MULTILINE)]


def test_the_documented_request_is_exactly_what_is_sent(request_) -> None:
    [documented, *_] = section_10_blocks("jsonc")
    v1 = request_.model_copy(update={"extensions": {TURN_EXTENSION: 0}})
    assert sent(v1) == documented


def test_the_documented_results_become_the_documented_v1_results(request_) -> None:
    _, success, error = section_10_blocks("jsonc")
    ok_v1, error_v1 = section_10_blocks("json")
    assert decode_result(json.dumps(success).encode(), request_).to_wire() == ok_v1
    assert decode_result(json.dumps(error).encode(), request_).to_wire() == error_v1
