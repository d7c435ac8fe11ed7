"""Fixtures for the envelope tests: a well-formed request, as a model and as a dict."""

from __future__ import annotations

import pytest

from envelopes.v1 import RequestLimits, ToolCallRequest, ToolRef


@pytest.fixture
def request_model() -> ToolCallRequest:
    return ToolCallRequest(
        id="call-1",
        tool=ToolRef(name="echo"),
        arguments={"text": "hi"},
        deadline_ms=1_700_000_000_000,
        limits=RequestLimits(max_result_bytes=65536),
    )


@pytest.fixture
def request_doc(request_model: ToolCallRequest) -> dict:
    """The request as a plain JSON-ready dict, to mutate in tests."""
    return request_model.to_wire()
