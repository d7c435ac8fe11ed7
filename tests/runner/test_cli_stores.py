"""Stores never appear by accident (issue 24, item 2): a command that only reads or
acts on existing sessions refuses a store that is not there, naming it and how one is
made, and creates nothing; the default store is named on stderr whenever it is used;
the commands that start sessions create theirs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

CLI = [sys.executable, "-m", "runner.cli"]
DEMO_AGENT = REPO / "examples" / "agents" / "demo.json"


def agents_runner(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTS_RUNNER_STORE"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


READERS = [
    ["session", "list"],
    ["session", "show", "s-1"],
    ["session", "pending", "s-1"],
    ["session", "resume", "s-1"],
    ["session", "fail", "tok", "--reason", "down"],
    ["audit"],
]


@pytest.mark.parametrize("command", READERS, ids=lambda c: " ".join(c[:2]))
def test_a_missing_store_is_refused_and_nothing_is_created(tmp_path: Path, command: list[str]):
    done = agents_runner(tmp_path, *command, "--store", "typo-dir/x.db")
    assert done.returncode == 2, done.stderr
    assert "there is no store at typo-dir/x.db" in done.stderr
    assert "`run`, `session start`" in done.stderr  # how one is made
    assert len(done.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_the_default_store_is_named_and_a_missing_one_points_at_the_stores_there(
    tmp_path: Path,
):
    (tmp_path / ".agents-runner").mkdir()
    (tmp_path / ".agents-runner" / "demo.db").touch()
    done = agents_runner(tmp_path, "session", "list")
    assert done.returncode == 2
    assert "there is no store at .agents-runner/state.db (the default store" in done.stderr
    assert "stores here: --store .agents-runner/demo.db" in done.stderr
    assert not (tmp_path / ".agents-runner" / "state.db").exists()


def test_starting_a_session_creates_the_default_store_and_says_which(tmp_path: Path):
    started = agents_runner(tmp_path, "--agent-file", str(DEMO_AGENT), "session", "start",
                            "--prompt", "hi")  # fmt: skip
    assert started.returncode == 0, started.stderr
    note = "agents-runner: store: .agents-runner/state.db (the default;"
    assert started.stderr.startswith(note)
    assert (tmp_path / ".agents-runner" / "state.db").is_file()
    listed = agents_runner(tmp_path, "session", "list", "--json")
    assert listed.returncode == 0 and listed.stderr.startswith(note)
    explicit = agents_runner(tmp_path, "session", "list", "--store", ".agents-runner/other.db")
    assert explicit.returncode == 2  # given, and missing: refused, not announced
    assert "store: " not in explicit.stderr
