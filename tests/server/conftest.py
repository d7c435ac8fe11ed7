"""A real uvicorn on 127.0.0.1 (a free port) serving create_app over a SQLite store in
tmp_path, with the seed's scripted agent in an agents directory, and httpx clients."""

from __future__ import annotations

import hashlib
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.types import ASGIApp

from runner.server import Grant, create_app
from runner.stores import SQLiteStore

SEED = Path(__file__).resolve().parents[2] / "examples" / "agents" / "agents-exe"
TOKENS = {"operator": "op-secret", "viewer": "view-secret", "worker-a": "worker-a-secret",
          "worker-b": "worker-b-secret"}  # fmt: skip


@dataclass
class Served:
    url: str
    store: SQLiteStore

    def client(self, who: str | None = "operator") -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKENS[who]}"} if who else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def grants() -> list[Grant]:
    def grant(name: str, role: str, tools: tuple[str, ...] = ()) -> Grant:
        digest = hashlib.sha256(TOKENS[name].encode()).hexdigest()
        return Grant.model_validate({"name": name, "sha256": digest, "role": role,
                                     "tools": tools})  # fmt: skip

    return [grant("operator", "operator"), grant("viewer", "viewer"),
            grant("worker-a", "claimer", ("fetch_remote_a",)),
            grant("worker-b", "claimer", ("fetch_remote_b",))]  # fmt: skip


def agents_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "agents"
    directory.mkdir()
    for name in ("my-agent.scripted.json", "my-agent.script.json"):
        shutil.copy(SEED / name, directory / name)
    return directory


@contextmanager
def serving(app: ASGIApp) -> Iterator[str]:
    """`app` on a real uvicorn on 127.0.0.1 (a free port) until the block ends: its URL."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        threading.Event().wait(0.01)
    host, port = sock.getsockname()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    store = SQLiteStore(tmp_path / "state.db")
    try:
        with serving(create_app(store, agents_dir(tmp_path), grants())) as url:
            yield Served(url, store)
    finally:
        store.close()
