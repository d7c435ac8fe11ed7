"""Shared test helpers: request factories and the misbehaving worker's path."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from envelopes.v1 import RequestLimits, ToolCallRequest, ToolRef

REPO = Path(__file__).resolve().parent.parent
WORKERS = Path(__file__).resolve().parent / "workers"
MISBEHAVE = WORKERS / "misbehave.py"


def make_request(
    tool: str = "bash",
    arguments: dict | None = None,
    *,
    seconds: float = 30.0,
    max_result_bytes: int = 65536,
    request_id: str = "call-1",
) -> ToolCallRequest:
    return ToolCallRequest(
        id=request_id,
        tool=ToolRef(name=tool),
        arguments=arguments or {},
        deadline_ms=int((time.time() + seconds) * 1000),
        limits=RequestLimits(max_result_bytes=max_result_bytes),
    )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
