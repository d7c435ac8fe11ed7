"""A known field in the wrong object says where it belongs (issue 24, item 5): in what
a worker sends back (decode_result, decode_describe_result), as in an agent file."""

from __future__ import annotations

import json

import pytest

from envelopes import codec
from tests.conftest import make_request


def result(**fields: object) -> bytes:
    return json.dumps(
        {"kind": "ToolCallResult", "version": "1.0", "id": "call-1", **fields}
    ).encode()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (result(status="error", error={"code": "TOOL_FAILED", "message": "x"}, retryable=False),
         "retryable: Extra inputs are not permitted; `retryable` belongs on error"),
        (result(status="ok", output={"type": "text", "content": "hi", "status": "ok"}),
         "output.text.status: Extra inputs are not permitted; `status` belongs at the top level"),
        (result(status="ok", output={"type": "text", "content": "hi"}, content="hi"),
         "`content` belongs on output"),
    ],
)  # fmt: skip
def test_a_result_field_in_the_wrong_object_is_placed(document: bytes, message: str) -> None:
    with pytest.raises(codec.MalformedOutput) as caught:
        codec.decode_result(document, make_request())
    assert message in str(caught.value), str(caught.value)


def test_a_describe_field_in_the_wrong_object_is_placed() -> None:
    document = {"kind": "DescribeResult", "version": "1.0", "worker": {"name": "w", "version": "1"},
                "supported_versions": ["1.0"], "tools": [], "input_schema": {}}  # fmt: skip
    with pytest.raises(codec.MalformedOutput) as caught:
        codec.decode_describe_result(json.dumps(document).encode(), 65536)
    assert "`input_schema` belongs on tools" in str(caught.value), str(caught.value)


def test_an_unknown_field_is_only_refused() -> None:
    with pytest.raises(codec.MalformedOutput) as caught:
        codec.decode_result(result(status="ok", output={"type": "text", "content": ""}, x=1),
                            make_request())  # fmt: skip
    assert str(caught.value) == "invalid ToolCallResult: x: Extra inputs are not permitted"
