"""/readyz with serve's check (runner.isolation.check_engine) against the running Docker
engine: ready."""

from __future__ import annotations

from pathlib import Path

import docker
import httpx

from runner.isolation import check_engine
from tests.server.test_readyz import served_with


def test_the_running_engine_makes_it_ready(tmp_path: Path, api: docker.APIClient) -> None:
    with served_with(tmp_path, check_engine) as url:
        answer = httpx.get(f"{url}/readyz")
    assert answer.status_code == 200, answer.text
    assert answer.json()["docker"] == "ok"
