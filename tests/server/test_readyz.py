"""/readyz: ready when the store answers and, when the server is given a Docker check,
the engine too; 503 naming what is unreachable otherwise. /healthz stays 200."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from runner.isolation import check_engine
from runner.server import create_app
from runner.stores import SQLiteStore
from tests.server.conftest import serving


@contextmanager
def served_with(tmp_path: Path, check: Callable[[], None] | None) -> Iterator[str]:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        with serving(create_app(store, None, None, docker_check=check)) as url:
            yield url
    finally:
        store.close()


def test_a_failing_engine_check_makes_it_not_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # serve's own check, against an engine that is not there (a socket nobody listens on)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with served_with(tmp_path, check_engine) as url:
        answer = httpx.get(f"{url}/readyz")
        assert httpx.get(f"{url}/healthz").status_code == 200
    assert answer.status_code == 503
    body = answer.json()
    assert body["status"] == "unavailable" and body["store"] == "ok"
    assert "No such file or directory" in body["docker"]  # the reason, as the client gave it


def test_a_passing_engine_check_is_reported(tmp_path: Path) -> None:
    calls: list[int] = []
    with served_with(tmp_path, lambda: calls.append(1)) as url:
        answer = httpx.get(f"{url}/readyz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ready", "store": "ok", "docker": "ok"}
    assert calls == [1]  # asked at each probe, not once at start


def test_without_a_check_docker_is_not_reported(tmp_path: Path) -> None:
    with served_with(tmp_path, None) as url:
        assert httpx.get(f"{url}/readyz").json() == {"status": "ready", "store": "ok"}
