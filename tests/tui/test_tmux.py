"""End to end: the real `agents-runner tui` in a tmux pane (send-keys, capture-pane)
against a SQLite store where the seed agent's session waits on its two deferred calls;
both are answered through the keys and the final answer shows. tmux must be installed
(scripts/test installs it): this test skips nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from runner.stores import SQLiteStore
from tests.tui.conftest import waiting_session

REPO = Path(__file__).resolve().parents[2]
#: capture-pane looks a test takes before it gives up on a screen (a bound, not a timing).
LOOKS = 600


class Pane:
    def __init__(self, socket: str) -> None:
        self.socket = socket

    def tmux(self, *args: str) -> str:
        # The pane's own size, not one a test harness left in COLUMNS/LINES.
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True,
                              text=True, timeout=30, env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "tui")

    def wait_for(self, *texts: str) -> str:
        for _ in range(LOOKS):
            shown = self.screen()
            if all(t in shown for t in texts):
                return shown
            subprocess.run(["sleep", "0.1"], check=True)
        raise AssertionError(f"never showed {texts!r}; the screen:\n{self.screen()}")

    def keys(self, *keys: str, literal: bool = False) -> None:
        self.tmux("send-keys", "-t", "tui", *(["-l"] if literal else []), *keys)


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[tuple[Pane, str, Path]]:
    assert shutil.which("tmux"), "tmux is needed (scripts/test installs it)"
    path = tmp_path / "state.db"
    store = SQLiteStore(path)
    try:
        sid = anyio.run(waiting_session, store)
    finally:
        store.close()
    pane = Pane(f"agents-runner-test-{uuid.uuid4().hex[:8]}")
    command = f"{sys.executable} -m runner.cli tui --store {path}; sleep 30"
    pane.tmux("new-session", "-d", "-s", "tui", "-x", "160", "-y", "50", "-c", str(REPO),
              command)  # fmt: skip
    try:
        yield pane, sid, path
    finally:
        pane.tmux("kill-server")


def test_the_real_tui_answers_both_deferred_calls_through_the_keys(pane):
    pane, sid, path = pane
    pane.wait_for("Pending (2)", "fetch_remote_a", "fetch_remote_b")
    pane.keys("C-n")
    pane.wait_for("Answering call_remote_a (fetch_remote_a)")
    pane.keys('{"orders": 12}', literal=True)
    pane.keys("Enter")
    pane.wait_for("Pending (1)", "answered call_remote_a")
    pane.keys("C-n")
    pane.wait_for("Answering call_remote_b (fetch_remote_b)")
    pane.keys("3 open tickets", literal=True)
    pane.keys("Enter")
    pane.wait_for("Pending (0)", "is completed: All three calls are complete",
                  "my-agent  completed", '- fetch_remote_a: {"orders": 12}',
                  "- fetch_remote_b: 3 open tickets")  # fmt: skip
    pane.keys("C-q")
    store = SQLiteStore(path)
    try:
        assert store.load(sid).status == "completed"
    finally:
        store.close()
