"""scripts/demo as a user runs it: the three-step demo, then a session left waiting on two
deferred calls and the exact `agents-runner tui` command that answers it by hand."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_ends_pointing_at_the_tui_for_a_waiting_session(tmp_path: Path) -> None:
    store = tmp_path / "demo.db"
    done = subprocess.run([str(ROOT / "scripts" / "demo"), "--store", str(store)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    command = re.search(r"^\s+(\S+/agents-runner) tui --store (\S+)$", done.stderr, re.M)
    assert command is not None, done.stderr[-2000:]
    assert Path(command.group(1)).is_file() and Path(command.group(2)) == store
    waiting = re.search(r"Session (\S+) now waits on two deferred calls", done.stderr)
    assert waiting is not None
    pending = subprocess.run(
        [command.group(1), "session", "pending", waiting.group(1), "--store", str(store),
         "--json"], capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    tools = sorted(c["tool"] for c in json.loads(pending.stdout)["calls"])
    assert tools == ["fetch_remote_a", "fetch_remote_b"]
    # ... and the exact command that lists the demo's sessions, from its own store
    listing = re.search(r"^\s+(\S+/agents-runner session list --store \S+)$", done.stderr, re.M)
    assert listing is not None, done.stderr[-2000:]
    listed = subprocess.run([*listing.group(1).split(), "--json"], capture_output=True,
                            text=True, timeout=120, check=True)  # fmt: skip
    assert waiting.group(1) in {row["id"] for row in json.loads(listed.stdout)["sessions"]}


FAKE_PYTHON = """#!/bin/sh
[ "$1" = -V ] && { echo "Python 3.11.0"; exit 0; }
echo "$*" >> "$(dirname "$0")/../pip-args"
"""


def test_the_demo_installs_the_project_alone(tmp_path: Path) -> None:
    """scripts/demo's ensure_venv call installs `-e .`, not the test extras (a 354 MB
    virtualenv), into a virtualenv whose python records what it was asked."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    (call,) = re.findall(r"^ensure_venv .*$", (ROOT / "scripts" / "demo").read_text(), re.M)
    script = f"source {ROOT}/scripts/lib/engine.sh && AGENTS_RUNNER_ROOT={tmp_path} && {call}"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (args,) = (tmp_path / ".venv" / "pip-args").read_text().splitlines()
    assert args.endswith("install -qq --disable-pip-version-check -e .") and "[test]" not in args
