"""`agents-runner serve` as a real subprocess for the tests: started on a free loopback
port, ready once /healthz answers, stopped with SIGTERM (a drain) or SIGKILL (a crash).
Its stderr goes to a file, so a chatty server can never block on a full pipe."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

CLI = [sys.executable, "-m", "runner.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(predicate: Callable[[], object], timeout_s: float = 60.0, what: str = "") -> None:
    """Poll until `predicate()` holds; the bound only catches a hang, it is not a speed test."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not reached in {timeout_s:g}s: {what or predicate}"
        time.sleep(0.05)


@dataclass
class Serve:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Send `sig` and wait for the exit; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=120)


def start_serve(store: str, cwd: Path, *args: str, env: Mapping[str, str] | None = None,
                name: str = "serve", host: str = "127.0.0.1") -> Serve:  # fmt: skip
    """`agents-runner serve --store STORE --host HOST --port FREE ARGS...`, once it
    answers /healthz."""
    port = free_port()
    log = cwd / f"{name}-{port}.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [*CLI, "serve", "--store", store, "--host", host, "--port", str(port), *args],
            cwd=cwd, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
    served = Serve(process, f"http://{host}:{port}", log)

    def healthy() -> bool:
        assert process.poll() is None, f"serve exited {process.returncode}: {served.stderr()}"
        try:
            return httpx.get(f"{served.url}/healthz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(healthy, what="serve answering /healthz")
    except BaseException:
        served.stop(signal.SIGKILL)
        raise
    return served


def session_of(http: httpx.Client, session_id: str) -> dict[str, Any]:
    answer = http.get(f"/v1/sessions/{session_id}")
    assert answer.status_code == 200, answer.text
    document: dict[str, Any] = answer.json()
    return document


def wait_for_status(http: httpx.Client, session_id: str, *statuses: str,
                    timeout_s: float = 120.0) -> dict[str, Any]:  # fmt: skip
    """The session once its status is one of `statuses`."""
    found: dict[str, Any] = {}

    def reached() -> bool:
        found.update(session_of(http, session_id))
        return found.get("state", found["status"]) in statuses  # ours: `state`

    wait_for(reached, timeout_s, f"session {session_id} {'/'.join(statuses)}")
    return found


def tool_results(session: dict[str, Any]) -> list[str]:
    """The tool-call ids of every tool result in the conversation, in order, each as
    often as the model was given it."""
    return [result["tool_call_id"] for turn in session["turns"]
            for result in turn.get("tool_results", [])]  # fmt: skip


def llm_turns(session: dict[str, Any]) -> int:
    return sum(turn["kind"] == "llm" for turn in session["turns"])


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def write_json(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document))
    return path
