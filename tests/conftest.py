"""Shared test helpers: request factories and the misbehaving worker's path."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from envelopes.v1 import RequestLimits, ToolCallRequest, ToolRef
from runner.stores import DurableStore, open_store
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


# --- one contract, two engines ---------------------------------------------------------
# The store contract, the durability tests and the crash matrix run on every durable
# engine from the same test code: parametrized by `store_engine` (ids sqlite/postgres, so
# `-k postgres` selects one engine's variants).

#: The durable engines, as `store_engine` fixture ids.
ENGINES = ("sqlite", "postgres")


class StoreLocations:
    """Where one test's durable stores live, on one engine: `primary` (what `--store`
    or open_store takes), `fresh()` for another, separate store of the same engine, and
    `open()` for a store at either, closed when the test ends."""

    def __init__(self, engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.engine, self._tmp, self._request = engine, tmp_path, request
        self._cleanup = ExitStack()
        self._count = 0
        self.primary = self.fresh()

    def fresh(self) -> str:
        """A new, empty store location (an SQLite file, or a PostgreSQL database)."""
        self._count += 1
        if self.engine == "sqlite":
            return str(self._tmp / f"store-{self._count}.db")
        if self._count == 1:  # the per-test database the postgres_url fixture gives
            url: str = self._request.getfixturevalue("postgres_url")
            return url
        server: str = self._request.getfixturevalue("postgres_server")
        return self._cleanup.enter_context(fresh_database(server))

    def open(self, location: str | None = None) -> DurableStore:
        opened = open_store(location or self.primary)
        self._cleanup.callback(opened.close)
        assert isinstance(opened, DurableStore), opened
        return opened

    def close(self) -> None:
        self._cleanup.close()


@pytest.fixture(params=ENGINES)
def store_engine(request: pytest.FixtureRequest) -> str:
    """The durable engine under test; a PostgreSQL database is only made for its own."""
    param: str = request.param
    return param


@pytest.fixture
def store_locations(
    store_engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[StoreLocations]:
    locations = StoreLocations(store_engine, tmp_path, request)
    try:
        yield locations
    finally:
        locations.close()


@pytest.fixture
def store_location(store_locations: StoreLocations) -> str:
    """The engine's store location: an SQLite file in tmp_path, or a fresh database."""
    return store_locations.primary


@pytest.fixture
def durable_store(store_locations: StoreLocations) -> DurableStore:
    """The durable store at `store_location`, opened as `--store` would open it."""
    return store_locations.open()
