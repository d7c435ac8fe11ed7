"""Section 8's version rules, one per question (issue 34, item 2): the grammar (no leading
zeros, compared as numbers), the order of a worker's checks, the version and id of a
refusal, and the runner's reading of an UNSUPPORTED_VERSION answer."""

from __future__ import annotations

import re
from typing import Any

import pytest

from envelopes import codec, rules, schema, wire
from envelopes.v1 import (
    RESERVED_ID,
    ToolCallRequest,
    ToolCallResult,
    highest_version,
    version_at_least,
    version_tuple,
)
from envelopes.worker import Worker

CALL = {"kind": "ToolCallRequest", "version": "1.0", "id": "t1", "tool": {"name": "echo"},
        "arguments": {"text": "hi"}, "deadline_ms": 1795000000000,
        "limits": {"max_result_bytes": 4096}}  # fmt: skip


@pytest.mark.parametrize("text", ["1.0", "1.1", "0.9", "1.10", "9999.9999", "0.0"])
def test_versions(text: str) -> None:
    assert version_tuple(text) is not None
    assert rules.is_version(text)
    assert re.fullmatch(rules.VERSION_PATTERN.strip("^$"), text)


@pytest.mark.parametrize("text", ["1.01", "01.0", "00.1", "1.00", "1", "2", "1.0.0", "v1.0",
                                  " 1.0", "1.0\n", "10000.0", "", "1.", ".1"])  # fmt: skip
def test_not_versions(text: str) -> None:
    assert version_tuple(text) is None
    assert not rules.is_version(text)
    assert not schema.validator("describe-request").is_valid(
        {"kind": "DescribeRequest", "version": text}
    )


def test_versions_compare_as_numbers() -> None:
    assert version_at_least("1.10", "1.9")
    assert highest_version(["1.9", "1.10", "1.0"]) == "1.10"
    assert highest_version(list(rules.SUPPORTED_VERSIONS)) == "1.1"


def refusal(doc: dict[str, Any], supported: tuple[str, ...] = ("1.0", "1.1")) -> codec.RequestError:
    with pytest.raises(codec.RequestError) as caught:
        codec.decode_request(wire.dumps(doc), supported)
    return caught.value


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"version": "2"}, "INVALID_REQUEST"),  # not a version at all
        ({"version": "1.01"}, "INVALID_REQUEST"),
        ({"version": 2}, "INVALID_REQUEST"),
        ({"version": "2.0"}, "UNSUPPORTED_VERSION"),
        ({"version": "1.999"}, "UNSUPPORTED_VERSION"),
        # kind is checked before version: a bad kind wins over a bad version.
        ({"kind": "Nope", "version": "2.0"}, "INVALID_REQUEST"),
        # version before the rest: an unsupported version wins over a missing field.
        ({"version": "2.0", "limits": None}, "UNSUPPORTED_VERSION"),
    ],
)
def test_the_order_of_a_workers_checks(changes: dict[str, Any], code: str) -> None:
    error = refusal({**CALL, **changes})
    assert error.code == code, error.message
    if changes.get("kind") == "Nope":
        assert error.message.startswith("kind:")


def test_a_refusal_is_written_in_the_highest_version_the_worker_speaks() -> None:
    assert refusal({**CALL, "version": "2.0"}).version == "1.1"
    assert refusal({**CALL, "version": "2"}).version == "1.1"
    # A request of a version the worker speaks gets its refusal in that version.
    assert refusal({**CALL, "limits": {}}).version == "1.0"


def sdk() -> Worker:
    w = Worker("v", "1.0.0")

    schema_ = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 9}},
               "required": ["text"], "additionalProperties": False}  # fmt: skip

    @w.tool("echo", description="Echo.", input_schema=schema_, effects="none")
    def echo(arguments: dict[str, Any], _request: object) -> str:
        return str(arguments["text"])

    return w


@pytest.mark.parametrize("kind", ["ToolCallRequest", "DescribeRequest"])
def test_the_sdk_answers_unsupported_version_in_the_version_it_speaks(kind: str) -> None:
    doc = {**CALL, "version": "2.0"} if kind == "ToolCallRequest" else {"kind": kind}
    answer = sdk().handle(wire.dumps({**doc, "version": "2.0"}))
    assert isinstance(answer, ToolCallResult) and answer.error is not None
    assert (answer.version, answer.error.code) == ("1.1", "UNSUPPORTED_VERSION")
    # A describe has no id; a call's valid id is echoed.
    assert answer.id == (RESERVED_ID if kind == "DescribeRequest" else "t1")
    assert "supported versions: 1.0, 1.1" in answer.error.message


def test_the_reserved_id_is_one_no_request_can_carry() -> None:
    assert not re.fullmatch(rules.ID_PATTERN.strip("^$"), RESERVED_ID)
    assert not rules.ID.match(RESERVED_ID)
    assert refusal({**CALL, "id": RESERVED_ID}).code == "INVALID_REQUEST"
    answer = sdk().handle(b"not json")
    assert isinstance(answer, ToolCallResult) and answer.id == RESERVED_ID
    assert answer.version == "1.1"
    assert schema.validator("worker-result", "1.1").is_valid(answer.to_wire())
    # The runner's outcome always carries its request's id: the full-outcome schema
    # refuses the reserved one.
    assert not schema.validator("tool-call-result", "1.1").is_valid(answer.to_wire())


def unsupported(version: str, id_: str = "t1") -> bytes:
    error = {"code": "UNSUPPORTED_VERSION", "message": "supported versions: 1.0",
             "retryable": False}  # fmt: skip
    return wire.dumps({"kind": "ToolCallResult", "version": version, "id": id_,
                       "status": "error", "error": error})  # fmt: skip


def test_the_runner_accepts_the_workers_highest_version_in_an_unsupported_version_answer() -> None:
    request = ToolCallRequest.model_validate({**CALL, "version": "1.1"})
    result = codec.decode_result(unsupported("1.0"), request)
    assert result.error is not None and result.error.code == "UNSUPPORTED_VERSION"
    assert codec.decode_result(unsupported("2.3"), request).version == "2.3"


@pytest.mark.parametrize(
    "data",
    [
        unsupported("1.01"),  # not a version
        unsupported("1.0", id_="t2"),  # the id is still echoed
        unsupported("1.0").replace(b"UNSUPPORTED_VERSION", b"TOOL_FAILED"),  # other codes echo
        wire.dumps(
            {
                "kind": "ToolCallResult",
                "version": "1.0",
                "id": "t1",
                "status": "ok",
                "output": {"type": "text", "content": "hi"},
            }
        ),
    ],
)
def test_any_other_version_mismatch_is_malformed(data: bytes) -> None:
    request = ToolCallRequest.model_validate({**CALL, "version": "1.1"})
    with pytest.raises(codec.MalformedOutput):
        codec.decode_result(data, request)
