"""Issue 24 item 6: `agents-runner serve`'s start-up errors are one line each with exit 2
(a port in use printed a 40-line BaseExceptionGroup traceback), a started server says where
it listens, and `--access-log` logs each request (continuation and claim tokens masked)."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.server.processes import start_serve
from tests.server.test_serve_cli import serve


def one_line_error(done: subprocess.CompletedProcess[str], *said: str) -> str:
    stderr = done.stderr
    assert done.returncode == 2, stderr
    assert "Traceback" not in stderr and "ExceptionGroup" not in stderr, stderr
    (line,) = stderr.strip().splitlines()
    assert line.startswith("agents-runner: error: "), line
    for words in said:
        assert words in line, line
    text: str = line
    return text


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve("--store", str(tmp_path / "s.db"), "--no-auth", "--port", str(port),
                     cwd=tmp_path)  # fmt: skip
    one_line_error(done, f"cannot listen on 127.0.0.1:{port}", "already in use", "--port")


@pytest.mark.parametrize(
    ("content", "said"),
    [(None, "cannot read the tokens file"), ("{", "Invalid JSON"),
     ('[{"name": "a", "role": "god", "sha256": "' + "0" * 64 + '"}]', "role"),
     ('[{"name": "a", "role": "viewer", "sha256": "' + "0" * 64 + '"},'
      ' {"name": "a", "role": "viewer", "sha256": "' + "1" * 64 + '"}]', "unique")],
    ids=["missing", "not-json", "bad-role", "duplicate-names"],
)  # fmt: skip
def test_a_bad_tokens_file_is_one_line(tmp_path: Path, content: str | None, said: str) -> None:
    tokens = tmp_path / "tokens.json"
    if content is not None:
        tokens.write_text(content)
    done = serve("--store", str(tmp_path / "s.db"), "--tokens", str(tokens), cwd=tmp_path)
    one_line_error(done, "--tokens:", said)


@pytest.mark.parametrize(
    ("store", "said"),
    [("postgresql://agents@127.0.0.1:1/agents", "cannot connect to"),
     ("/proc/no-such-dir/s.db", "cannot open the store")],
    ids=["postgres-refused", "sqlite-uncreatable"],
)  # fmt: skip
def test_a_store_that_does_not_answer_is_one_line(
    tmp_path: Path, store: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTS_RUNNER_STORE_WAIT_SECONDS", "0")
    done = serve("--store", store, "--no-auth", cwd=tmp_path)
    one_line_error(done, said)


def test_a_started_server_says_where_it_listens_and_logs_requests_if_asked(
    tmp_path: Path,
) -> None:
    served = start_serve(str(tmp_path / "s.db"), tmp_path, "--no-auth", "--access-log")
    try:
        httpx.get(f"{served.url}/healthz", timeout=10)
        httpx.post(f"{served.url}/v1/continuations/tok-secret-123", json={"result": 1},
                   timeout=10)  # fmt: skip
        httpx.post(f"{served.url}/v1/claims/claim-secret-456/heartbeat", timeout=10)
    finally:
        assert served.stop() == 0, served.stderr()
    log = served.stderr()
    messages = [json.loads(line)["message"] for line in log.splitlines() if line.startswith("{")]
    assert f"serve: listening on {served.url}" in messages
    assert '"GET /healthz HTTP/1.1" 200' in log
    assert '"POST /v1/continuations/… HTTP/1.1" 404' in log
    assert '"POST /v1/claims/…/heartbeat HTTP/1.1"' in log
    assert "tok-secret-123" not in log and "claim-secret-456" not in log


def test_without_access_log_requests_are_not_logged(tmp_path: Path) -> None:
    served = start_serve(str(tmp_path / "s.db"), tmp_path, "--no-auth")
    try:
        httpx.get(f"{served.url}/healthz", timeout=10)
    finally:
        assert served.stop() == 0, served.stderr()
    assert "/healthz" not in served.stderr()
    assert f"serve: listening on {served.url}" in served.stderr()
