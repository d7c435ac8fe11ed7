"""The seed's walkthrough through the real CLI, one process per command, one store file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from runner.stores import SQLiteStore
from tests.conftest import REPO

CLI = [sys.executable, "-m", "runner.cli"]
EXTERNAL = {"type": "object", "properties": {"q": {"type": "string"}}}
AGENT = {
    "slug": "walk",
    "executionMode": "asynchronous",
    "provider": {"tag": "scripted", "script": "walk.script.json"},
    "tools": [
        {"name": "fetch_local", "parameters": {"type": "object"}},
        {"name": "remote_a", "kind": "external", "parameters": EXTERNAL},
        {"name": "remote_b", "kind": "external", "parameters": EXTERNAL},
    ],
    "toolCallPolicyConfig": {"rules": [
        {"match": {"tool": "remote_a"}, "disposition": {"tag": "defer", "reason": "A"}},
        {"match": {"tool": "remote_b"}, "disposition": {"tag": "defer", "reason": "B"}},
    ]},
}  # fmt: skip
SCRIPT = {"responses": [
    {"tool_calls": [{"id": "l", "name": "fetch_local", "arguments": {"key": "weather"}},
                    {"id": "a", "name": "remote_a", "arguments": {"q": "x"}},
                    {"id": "b", "name": "remote_b", "arguments": {"q": "y"}}]},
    {"text": "local={{result:l}} a={{result:a}} b={{result:b}}"},
]}  # fmt: skip


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / "walk.json").write_text(json.dumps(AGENT))
    (tmp_path / "walk.script.json").write_text(json.dumps(SCRIPT))
    return tmp_path


def cli(workspace, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=workspace,
                          timeout=120)  # fmt: skip
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    return done


def js(workspace, *args: str) -> dict:
    return json.loads(cli(workspace, *args, "--json").stdout)


def test_the_walkthrough_start_resume_pending_complete_twice_resume(workspace):
    started = js(workspace, "session", "start", "--agent-file", "walk.json", "--prompt", "go")
    sid = started["session_id"]
    assert started["status"] == "running"
    paused = js(workspace, "session", "resume", sid)
    assert paused["status"] == "waiting" and paused["ran"] == ["l"]
    pending = js(workspace, "session", "pending", sid)["calls"]
    tokens = {p["tool"]: p["continuation_token"] for p in pending}
    assert set(tokens) == {"remote_a", "remote_b"}
    (workspace / "a.json").write_text('{"rows": 3}')
    (workspace / "b.txt").write_text("plain words")
    first = js(workspace, "session", "complete", tokens["remote_a"], "a.json")
    assert first["applied"] == [tokens["remote_a"]] and first["open_calls"] == 1
    second = js(workspace, "session", "complete", tokens["remote_b"], "b.txt")
    assert second["open_calls"] == 0 and second["status"] == "running"
    again = js(workspace, "session", "complete", tokens["remote_b"], "b.txt")
    assert again["applied"] == [] and again["already_completed"] == [tokens["remote_b"]]
    refused = cli(workspace, "session", "complete", tokens["remote_b"], "a.json", code=1)
    assert "already ended with a different result" in refused.stderr
    final = js(workspace, "session", "resume", sid)
    assert final["status"] == "completed"
    assert final["final_answer"] == (
        'local={"key": "weather", "value": {"city": "Lyon", "celsius": 18}}'
        ' a={"rows": 3} b=plain words'
    )
    listed = js(workspace, "session", "list", "--status", "completed")["sessions"]
    assert [s["id"] for s in listed] == [sid]
    shown = cli(workspace, "session", "show", sid).stdout
    assert "completed" in shown and "remote_b" in shown


def test_run_pauses_with_the_report_and_global_agent_file(workspace):
    report = json.loads(cli(workspace, "--agent-file", "walk.json", "run", "--prompt", "go").stdout)
    assert report["status"] == "paused" and report["reason"] == "waiting on deferred calls"
    assert [(c["tool"], c["tool_call_id"]) for c in report["deferred_calls"]] == [
        ("remote_a", "a"), ("remote_b", "b")]  # fmt: skip
    token = report["deferred_calls"][0]["continuation_token"]
    cli(workspace, "session", "fail", token, "--reason", "system A is down")
    (workspace / "b.json").write_text('"fine"')
    cli(workspace, "session", "complete", report["deferred_calls"][1]["continuation_token"],
        "b.json")  # fmt: skip
    final = js(workspace, "session", "resume", report["session_id"])
    assert "a=[error TOOL_FAILED] system A is down" in final["final_answer"]


def test_freeze_and_cancel(workspace):
    sid = js(workspace, "session", "start", "--agent-file", "walk.json", "--prompt", "go",
             "--step")["session_id"]  # fmt: skip
    assert js(workspace, "session", "freeze", sid)["status"] == "frozen"
    err = cli(workspace, "session", "step", sid, code=2).stderr
    assert "is frozen; `session resume` continues it" in err
    assert js(workspace, "session", "cancel", sid)["status"] == "cancelled"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["session", "complete", "no-such-token", "walk.json"], "no call has the continuation"),
        (["session", "complete", "t", "empty.txt"], "is empty"),
        (["session", "start", "--agent-file", "walk.json"], "exactly one of --prompt"),
        (["session", "start", "--prompt", "x"], "--agent-file is required"),
        (["session", "start", "--agent-file", "bad.json", "--prompt", "x"],
         "agent file bad.json: maxConcurrency"),
        (["session", "resume", "s-nope"], "no session 's-nope'"),
        (["session", "list", "--status", "sleepy"], "--status: expected one of"),
    ],
)  # fmt: skip
def test_bad_input_gets_one_clear_line(workspace, args, message):
    (workspace / "empty.txt").write_text("  \n")
    (workspace / "bad.json").write_text(json.dumps({**AGENT, "maxConcurrency": "many"}))
    (workspace / ".agents-runner").mkdir()
    SQLiteStore(workspace / ".agents-runner" / "state.db").close()  # the default, empty
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=workspace,
                          timeout=60)  # fmt: skip
    assert done.returncode in (1, 2)
    assert message in done.stderr, done.stderr
    # one line, after the note naming the default store the command uses
    note = "agents-runner: store: .agents-runner/state.db (the default"
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith(note)]
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_the_demo_runs_its_three_steps_with_the_local_runner(tmp_path, engine, request):
    store = str(tmp_path / "demo.db") if engine == "sqlite" else request.getfixturevalue(
        "postgres_url")  # fmt: skip
    done = subprocess.run([*CLI, "demo", "--runner", "local", "--json", "--store", store],
                          capture_output=True, text=True, cwd=REPO, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)
    listed = subprocess.run([*CLI, "session", "list", "--json", "--store", store],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert [r["status"] for r in json.loads(listed.stdout)["sessions"]] == ["completed"]
    assert trace["runner"] == "local" and "not a sandbox" in trace["note"]
    assert [s["step"] for s in trace["steps"]] == [1, 2, 2, 3]
    for expected in ('"widgets": 42', '"orders_today": 17', '"open_tickets": 3', "sandbox Linux"):
        assert expected in trace["final_answer"]
