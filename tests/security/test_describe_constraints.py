"""DescribeResult is constrained as section 2 says (issue 34, item 5): unique tools and
versions, its version among them, object input schemas without remote references; and
the event budget a runner sends stays under its standard error cap."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from envelopes import codec, schema, wire
from envelopes.rules import EVENTS_MAX_BYTES_CEILING
from envelopes.v1 import ToolCallRequest
from runner.isolation.local import LocalProcessRunner, ProcessLimits
from runner.isolation.negotiation import plan

TOOL = {"name": "echo", "description": "Echo.", "effects": "none",
        "input_schema": {"type": "object", "additionalProperties": False}}  # fmt: skip
DESCRIBE = {"kind": "DescribeResult", "version": "1.0", "worker": {"name": "w", "version": "1"},
            "supported_versions": ["1.0"], "tools": [TOOL]}  # fmt: skip


def schema_(**changes: Any) -> dict[str, Any]:
    return {**TOOL, "input_schema": changes}


#: (what, the document, a word of the runner's refusal, whether the schema can say it)
BAD = [
    ("duplicate tool names", {**DESCRIBE, "tools": [TOOL, TOOL]}, "tools[1].name", False),
    ("duplicate versions", {**DESCRIBE, "supported_versions": ["1.0", "1.0"]}, "once", True),
    ("version not listed", {**DESCRIBE, "supported_versions": ["1.1"]}, "not in", False),
    ("an empty input schema", {**DESCRIBE, "tools": [schema_()]}, "describes an object", True),
    ("a remote $ref", {**DESCRIBE, "tools": [schema_(type="object", properties={
        "a": {"$ref": "https://evil.example/s.json"}})]}, "outside the schema", False),
]  # fmt: skip


@pytest.mark.parametrize(("what", "doc", "word", "in_schema"), BAD, ids=[b[0] for b in BAD])
def test_the_runner_refuses_an_under_constrained_describe(
    what: str, doc: dict[str, Any], word: str, in_schema: bool
) -> None:
    with pytest.raises(codec.MalformedOutput, match=None) as caught:
        codec.decode_describe_result(wire.dumps(doc), 1 << 20)
    assert word in str(caught.value), what
    # What JSON Schema can say, the schema says; the rest is prose (section 2) and code.
    assert schema.validator("describe-result").is_valid(doc) is not in_schema


def test_a_well_formed_describe_passes_both() -> None:
    assert codec.decode_describe_result(wire.dumps(DESCRIBE), 1 << 20).tools[0].name == "echo"
    assert schema.validator("describe-result").is_valid(DESCRIBE)


def test_the_event_budget_stays_under_half_the_stderr_cap() -> None:
    runner = LocalProcessRunner([sys.executable], limits=ProcessLimits(max_stderr_bytes=1 << 20))
    assert runner.events_max_bytes == 1 << 19
    assert LocalProcessRunner([sys.executable]).events_max_bytes == EVENTS_MAX_BYTES_CEILING // 2
    doc = {"kind": "ToolCallRequest", "version": "1.1", "id": "t", "tool": {"name": "echo"},
           "arguments": {}, "deadline_ms": 1795000000000, "limits": {"max_result_bytes": 9},
           "events": {"max_bytes": EVENTS_MAX_BYTES_CEILING}}  # fmt: skip
    sent = plan(ToolCallRequest.model_validate(doc), frozenset({"events"}), None, 1 << 19)
    assert sent.events is not None and sent.events.max_bytes == 1 << 19
    asked = plan(ToolCallRequest.model_validate({**doc, "events": None, "version": "1.0"}),
                 frozenset({"events"}), lambda _event: None, 1000)  # fmt: skip
    assert asked.events is not None and asked.events.max_bytes == 1000
