"""Expiry is decided by time, not by whoever next takes the lease: an overdue deferred
call shows as expired in `session show` and `session list` before any process has
recorded it, the store says the session is due, and a worker records the expiry."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from runner.stores import SQLiteStore

CLI = [sys.executable, "-m", "runner.cli"]
#: Long enough that the store is asked before it passes, even on a loaded machine.
EXPIRES_S = 3.0


def agent(expires_s: float) -> dict:
    defer = {"tag": "defer", "reason": "an approver", "expiresAfterSeconds": expires_s}
    return {
        "slug": "approve",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": "ask", "name": "approve", "arguments": {}}]},
            {"text": "saw {{result:ask}}"},
        ]},
        "executionMode": "asynchronous",
        "tools": [{"name": "approve", "kind": "external", "parameters": {"type": "object"}}],
        "toolCallPolicyConfig": {"default": defer},
    }  # fmt: skip


def cli(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*CLI, *args, "--store", str(ws / "s.db")], capture_output=True,
                          text=True, cwd=ws, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def js(ws: Path, *args: str) -> dict:
    return json.loads(cli(ws, *args, "--json").stdout)


def waiting_session(ws: Path, name: str, expires_s: float) -> str:
    (ws / f"{name}.json").write_text(json.dumps(agent(expires_s)))
    report = js(ws, "session", "start", "--agent-file", f"{name}.json", "--prompt", "go",
                "--step")  # fmt: skip
    assert report["status"] == "waiting"
    return report["session_id"]


def test_an_overdue_call_is_expired_before_any_worker_runs_then_a_worker_records_it(tmp_path):
    ws = tmp_path
    later = waiting_session(ws, "later", 3600)
    soon = waiting_session(ws, "soon", EXPIRES_S)
    with SQLiteStore(ws / "s.db") as store:
        expires_ms = store.load(soon).calls["ask"].expires_ms
        due = store.due_sessions(10)
        if store.now_ms() < expires_ms:  # asked before the expiry passed (3 s: nearly always)
            assert soon not in due
    while (time.time() * 1000) <= expires_ms:  # let its expiry pass (no assertion on time)
        time.sleep(0.05)

    shown = js(ws, "session", "show", soon)
    assert shown["calls"]["ask"]["state"] == "expired" and shown["calls"]["ask"]["overdue"]
    assert "expired" in shown["conditions"] and "expired" in shown["why"]
    assert "expires in -" not in shown["why"]
    human = cli(ws, "session", "show", soon).stdout
    assert "expired" in human and "expires in -" not in human
    listed = js(ws, "session", "list", "--status", "expired")["sessions"]
    assert [row["id"] for row in listed] == [soon]  # the other call has an hour left
    assert "expires in" in js(ws, "session", "show", later)["why"]

    with SQLiteStore(ws / "s.db") as store:
        # Only views changed: nothing was recorded, and the store says the session is due.
        assert store.load(soon).calls["ask"].state == "deferred"
        assert store.due_sessions(10) == [soon]

    cli(ws, "worker", "--exit-when-idle", "--poll-seconds", "0.05")
    with SQLiteStore(ws / "s.db") as store:
        recorded = store.load(soon)
        assert recorded.calls["ask"].state == "expired"
        assert recorded.status == "completed"
        assert recorded.final_answer.startswith("saw [expired EXPIRED] no result arrived")
        assert store.load(later).calls["ask"].state == "deferred"  # not due: untouched
