"""`agents-runner serve` as a real subprocess: what it refuses, and that its worker loop
advances a session created over HTTP and SIGTERM drains it to exit 0."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.server.conftest import agents_dir


def serve(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner.cli", "serve", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_it_refuses_to_start_without_access_control(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    done = serve("--store", store, cwd=tmp_path)
    assert done.returncode == 2 and "--tokens FILE is required" in done.stderr
    done = serve("--store", store, "--no-auth", "--host", "0.0.0.0", cwd=tmp_path)
    assert done.returncode == 2 and "loopback" in done.stderr
    (tmp_path / "t.json").write_text('[{"name": "a", "sha256": "beef", "role": "operator"}]')
    done = serve("--store", store, "--tokens", str(tmp_path / "t.json"), cwd=tmp_path)
    assert done.returncode == 2 and "sha256" in done.stderr and "Traceback" not in done.stderr


def test_it_refuses_a_store_that_cannot_lease(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    done = serve("--store", f"file:{tmp_path / 'files'}", "--no-auth", cwd=tmp_path)
    assert done.returncode == 2 and "lease" in done.stderr, done.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_it_serves_advances_sessions_and_drains_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "runner.cli", "serve", "--store", str(tmp_path / "s.db"),
         "--no-auth", "--port", str(port), "--agents", str(agents_dir(tmp_path)),
         "--poll-seconds", "0.05"],
        cwd=tmp_path, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        with httpx.Client(base_url=url) as http:
            made = http.post("/v1/sessions", json={"agent": "my-agent.scripted.json",
                                                   "prompt": "go", "run": "none"})  # fmt: skip
            assert made.status_code == 201 and made.json()["state"] == "running"
            session_id = made.json()["session_id"]
            # Not run by the request: the worker loop in the process advances it.
            while http.get(f"/v1/sessions/{session_id}").json()["state"] != "waiting":
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "draining" in stderr
