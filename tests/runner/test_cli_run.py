"""A failed start leaves no session behind without its id and state on the screen
(issue 24, item 9): with the provider's apiKeyEnv unset, `run` and `session start
--step` mark the session failed and print its id with the --retry hint, as an agent
without any provider does; once the key is there, `--retry` continues it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runner.stores import SQLiteStore
from tests.chat_server import ChatServer
from tests.conftest import REPO

CLI = [sys.executable, "-m", "runner.cli"]


def agent_file(tmp_path: Path, base_url: str = "http://127.0.0.1:9/v1") -> Path:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({
        "slug": "keyed", "system_prompt": "Answer.", "executionMode": "asynchronous",
        "provider": {"tag": "openaiCompatible", "baseUrl": base_url, "model": "m-1",
                     "apiKeyEnv": "FAKE_KEY"},
    }))  # fmt: skip
    return path


def agents_runner(
    tmp_path: Path, *args: str, key: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "FAKE_KEY"}
    env["PYTHONPATH"] = str(REPO)
    if key is not None:
        env["FAKE_KEY"] = key
    return subprocess.run([*CLI, *args, "--store", str(tmp_path / "s.db")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize(
    "command", [["run", "--prompt", "hi"], ["session", "start", "--step", "--prompt", "hi"]]
)
def test_an_unset_key_fails_the_session_visibly(tmp_path: Path, command: list[str]) -> None:
    done = agents_runner(tmp_path, "--agent-file", str(agent_file(tmp_path)), *command)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    found = re.search(r"s-[0-9a-f-]{36}", output)
    assert found is not None, output
    assert "FAKE_KEY" in output and "is unset or empty" in output
    store = SQLiteStore(tmp_path / "s.db")
    try:
        (row,) = store.list()
        assert row.id == found.group(0)
        assert store.load(row.id).status == "failed"
    finally:
        store.close()
    assert f"`session resume {row.id} --retry`" in done.stderr


def test_with_the_key_set_retry_continues_the_failed_session(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.reply({"role": "assistant", "content": "Hello there."})
    agent = agent_file(tmp_path, chat_server.url)
    failed = agents_runner(tmp_path, "--agent-file", str(agent), "run", "--prompt", "hi")
    session_id = re.search(r"s-[0-9a-f-]{36}", failed.stderr)
    assert failed.returncode == 1 and session_id is not None, failed.stderr
    again = agents_runner(tmp_path, "session", "resume", session_id.group(0), "--retry",
                          key="sk-test")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "Hello there." in again.stdout
    assert chat_server.headers[0]["Authorization"] == "Bearer sk-test"
