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
