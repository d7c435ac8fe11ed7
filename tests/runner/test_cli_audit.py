"""`agents-runner audit` and `--audit` in real subprocesses: a run audits to its store by
default, `--audit file:PATH` and AGENTS_RUNNER_AUDIT move the records, `off` warns, the
worker audits too, `isolate` only when asked; the listing's filters, table and JSON
lines; and one-line errors (a corrupt line, a bad time), never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from envelopes import codec
from tests.conftest import MISBEHAVE, REPO, make_request

CLI = [sys.executable, "-m", "runner.cli"]
ECHO_WORKER = REPO / "examples" / "workers" / "python" / "worker.py"
CANARY = "canary-91c04e7a-cli"


def agents_runner(
    *args: str, cwd, code: int | None = 0, env: dict[str, str] | None = None, stdin: bytes = b""
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTS_RUNNER_")}
    done = subprocess.run([*CLI, *args], input=stdin.decode(), capture_output=True, text=True,
                          cwd=cwd, timeout=120, env={**environment, **(env or {})})  # fmt: skip
    if code is not None:
        assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    return done


@pytest.fixture
def workspace(tmp_path):
    echo = {"tag": "runIsolated", "spec": {"tag": "localProcess",
            "argv": [sys.executable, str(ECHO_WORKER)]}}  # fmt: skip
    crash = {"tag": "runIsolated", "spec": {"tag": "localProcess",
             "argv": [sys.executable, str(MISBEHAVE), "exit3"]}}  # fmt: skip
    agent = {
        "slug": "audited",
        "executionMode": "asynchronous",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": "a", "name": "echo", "arguments": {"text": CANARY}},
                            {"id": "b", "name": "crash", "arguments": {"text": CANARY}}]},
            {"text": "said {{result:a}}"}]},
        "tools": [{"name": "echo", "parameters": {"type": "object"}},
                  {"name": "crash", "parameters": {"type": "object"}}],
        "toolCallPolicyConfig": {"rules": [{"match": {"tool": "crash"}, "disposition": crash}],
                                 "default": echo},
    }  # fmt: skip
    (tmp_path / "agent.json").write_text(json.dumps(agent))
    return tmp_path


def run(workspace, *options: str, env: dict[str, str] | None = None) -> str:
    done = agents_runner("run", "--agent-file", "agent.json", "--prompt", "go", "--store",
                         "s.db", "--json", *options, cwd=workspace, env=env)  # fmt: skip
    report = json.loads(done.stdout)
    assert report["final_answer"] == f"said {CANARY}"
    return report["session_id"]


def listed(workspace, *options: str) -> list[dict]:
    done = agents_runner("audit", "--json", *options, cwd=workspace)
    assert CANARY not in done.stdout
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_run_audits_to_its_store_and_audit_lists_and_filters(workspace):
    first = run(workspace)
    second = run(workspace)
    everything = listed(workspace, "--store", "s.db")
    assert sorted((r["session_id"], r["call_id"]) for r in everything) == sorted(
        (sid, call) for sid in (first, second) for call in ("a", "b"))  # fmt: skip
    assert {r["session_id"] for r in everything[:2]} == {first}  # oldest first
    in_store = ("--store", "s.db")
    assert {r["outcome"] for r in listed(workspace, *in_store, "--tool", "crash")} == {
        "WORKER_CRASHED"}  # fmt: skip
    assert {r["tool"] for r in listed(workspace, *in_store, "--outcome", "ok")} == {"echo"}
    assert {r["session_id"] for r in listed(workspace, *in_store, "--session", first)} == {first}
    assert len(listed(workspace, *in_store, "--since", "1h", "--limit", "3")) == 3
    assert listed(workspace, *in_store, "--until", "2000-01-01") == []
    table = agents_runner("audit", "--store", "s.db", "--tool", "echo", cwd=workspace).stdout
    assert "echo" in table and "2 record(s)" in table and CANARY not in table


def test_audit_file_and_off_send_the_records_elsewhere_or_nowhere(workspace):
    run(workspace, "--audit", "file:trail/calls.jsonl")
    assert len(listed(workspace, "--file", "trail/calls.jsonl")) == 2
    assert CANARY.encode() not in (workspace / "trail" / "calls.jsonl").read_bytes()
    run(workspace, env={"AGENTS_RUNNER_AUDIT": "file:trail/calls.jsonl"})
    assert len(listed(workspace, "--file", "trail/calls.jsonl")) == 4
    assert listed(workspace, "--store", "s.db") == []
    done = agents_runner("run", "--agent-file", "agent.json", "--prompt", "go", "--store",
                         "s.db", "--audit", "off", cwd=workspace)  # fmt: skip
    assert "auditing is off" in done.stderr
    assert listed(workspace, "--store", "s.db") == []


def test_the_worker_audits_the_sessions_it_advances(workspace):
    started = agents_runner("session", "start", "--agent-file", "agent.json", "--prompt", "go",
                            "--store", "s.db", "--json", cwd=workspace)  # fmt: skip
    sid = json.loads(started.stdout)["session_id"]
    agents_runner("worker", "--store", "s.db", "--exit-when-idle", "--poll-seconds", "0.1",
                  cwd=workspace)  # fmt: skip
    assert {(r["session_id"], r["call_id"]) for r in listed(workspace, "--store", "s.db")} == {
        (sid, "a"), (sid, "b")}  # fmt: skip


def test_isolate_audits_only_when_asked(workspace):
    request = codec.encode(make_request("echo", {"text": CANARY}))
    argv = ["isolate", "--runner", "local", "--", sys.executable, str(ECHO_WORKER)]
    agents_runner(*argv, cwd=workspace, stdin=request)
    assert list(workspace.iterdir()) == [workspace / "agent.json"]  # nothing written
    agents_runner(*argv[:3], "--audit", "file:one.jsonl", *argv[3:], cwd=workspace, stdin=request)
    [record] = listed(workspace, "--file", "one.jsonl")
    assert (record["tool"], record["outcome"], record["runner"]) == ("echo", "ok", "local")
    refused = agents_runner(*argv[:3], "--audit", "store", *argv[3:], cwd=workspace,
                            stdin=request, code=2)  # fmt: skip
    assert "`isolate` uses no store; give --audit file:PATH" in refused.stderr


def test_bad_input_gets_one_line_naming_what_and_where(workspace):
    run(workspace, "--audit", "file:calls.jsonl")
    with (workspace / "calls.jsonl").open("a") as handle:
        handle.write("{not json\n")
    corrupt = agents_runner("audit", "--file", "calls.jsonl", cwd=workspace, code=2)
    assert "calls.jsonl:3: not an audit record" in corrupt.stderr
    for option, value in (("--since", "last tuesday"), ("--until", "2026-13-01")):
        bad = agents_runner("audit", "--file", "calls.jsonl", option, value, cwd=workspace,
                            code=2)  # fmt: skip
        assert f"{option}: {value!r} is not a time" in bad.stderr
    missing = agents_runner("audit", "--store", "nowhere.db", cwd=workspace, code=2)
    assert "there is no store at nowhere.db" in missing.stderr
    assert not (workspace / "nowhere.db").exists()
    both = agents_runner("audit", "--store", "s.db", "--file", "calls.jsonl", cwd=workspace,
                         code=2)  # fmt: skip
    assert "not both" in both.stderr
    wrong = agents_runner("run", "--agent-file", "agent.json", "--prompt", "go",
                          "--audit", "syslog", cwd=workspace, code=2)  # fmt: skip
    assert "expected store, file:PATH or off" in wrong.stderr
