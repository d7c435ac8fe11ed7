"""`critical` (1.1, as JWS `crit`): members a worker must implement or refuse the
request (issue 34, item 4). The SDK refuses what it does not implement; the runner marks
input files and collect critical, so no worker runs a call without its inputs."""

from __future__ import annotations

from typing import Any

import pytest

from envelopes import codec, schema, wire
from envelopes.v1 import ToolCallRequest, ToolCallResult
from envelopes.worker import Worker
from runner.isolation.negotiation import plan

BASE = {"kind": "ToolCallRequest", "version": "1.1", "id": "t1", "tool": {"name": "echo"},
        "arguments": {"text": "hi"}, "deadline_ms": 1795000000000,
        "limits": {"max_result_bytes": 4096}}  # fmt: skip
EXT = {"acme.example/trace": "4bf9"}


def sdk() -> Worker:
    w = Worker("v", "1.0.0")
    free = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 9}},
            "additionalProperties": False}  # fmt: skip

    @w.tool("echo", description="Echo.", input_schema=free, effects="none")
    def echo(arguments: dict[str, Any], _request: object) -> str:
        return str(arguments.get("text"))

    return w


def answer(doc: dict[str, Any]) -> ToolCallResult:
    result = sdk().handle(wire.dumps(doc))
    assert isinstance(result, ToolCallResult)
    return result


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"critical": ["acme.example/trace"], "extensions": EXT}, "not implemented"),
        ({"critical": ["teleport"], "teleport": {"to": "mars"}}, "not implemented"),
        ({"critical": ["files"]}, "not in the request"),
        ({"critical": ["collect", "collect"]}, "once"),
        ({"critical": ["Bad Name"]}, "neither a member name"),
    ],
)
def test_a_worker_refuses_what_it_must_understand_and_does_not(
    changes: dict[str, Any], fragment: str
) -> None:
    result = answer({**BASE, **changes})
    assert result.error is not None and result.error.code == "INVALID_REQUEST"
    assert fragment in result.error.message


def test_a_worker_accepts_critical_members_it_implements() -> None:
    doc = {**BASE, "critical": ["acme.example/trace", "extensions"], "extensions": EXT}
    request = codec.decode_request(
        wire.dumps(doc), understood_extensions=frozenset({"acme.example/trace"})
    )
    assert isinstance(request, ToolCallRequest) and request.critical is not None
    assert answer({**BASE, "critical": ["arguments"]}).status == "ok"
    assert schema.validator("tool-call-request", "1.1").is_valid(doc)
    assert not schema.validator("tool-call-request", "1.1").is_valid(
        {**doc, "critical": ["extensions", "extensions"]}
    )


def test_critical_in_a_1_0_request_is_ignored_as_a_1_0_worker_would() -> None:
    assert answer({**BASE, "version": "1.0", "critical": ["teleport"]}).status == "ok"


def test_the_runner_marks_files_and_collect_critical() -> None:
    doc = {**BASE, "files": [{"path": "in.txt", "content": "x"}],
           "collect": {"patterns": ["*.txt"]}}  # fmt: skip
    sent = plan(ToolCallRequest.model_validate(doc), frozenset({"files"}), None)
    assert sent.critical == ["files", "collect"]
    assert sent.to_wire()["critical"] == ["files", "collect"]
    plain = plan(ToolCallRequest.model_validate(BASE | {"version": "1.0"}), frozenset(), None)
    assert plain.critical is None and "critical" not in plain.to_wire()
