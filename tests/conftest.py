"""Shared test helpers: request factories and the misbehaving worker's path."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envelopes.v1 import RequestLimits, ToolCallRequest, ToolRef
from tests.chat_server import ChatServer, serving
from tests.postgres_cluster import fresh_database, server_url

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


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A scripted chat-completions server on 127.0.0.1 (tests/chat_server.py)."""
    with serving() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The test PostgreSQL cluster's URL (see tests/postgres_cluster.py)."""
    with server_url() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh database of its own for one test: postgresql://postgres@127.0.0.1:PORT/t_..."""
    with fresh_database(postgres_server) as url:
        yield url
