"""Issue 23, finding 4 and item 4: a spec's env value is never stored or shown, yet the
worker gets it. A canary value sits in a localProcess spec's env; sessions run through
the real CLI (`run` attached, `session run-isolated --agent-file`, `worker --agents`),
and every output (their stdout and stderr, `session show/pending/list`, `audit`, the API's answers
and events over a real uvicorn) and every byte of the store's files (the SQLite file,
its -wal and -shm) is searched for it: never found. The worker reports a digest of what
it received, which matches the canary's."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from runner.server import create_app
from runner.stores import SQLiteStore
from tests.server.conftest import serving

CLI = [sys.executable, "-m", "runner.cli"]
CANARY = "canary-secret-4c7d2e91"
DIGEST = hashlib.sha256(CANARY.encode()).hexdigest()

#: A v1 worker that answers with a digest of the API_KEY it was given (never the value).
WORKER = """
import hashlib, json, os, sys
request = json.loads(sys.stdin.buffer.read())
if request["kind"] == "DescribeRequest":
    sys.stdout.write(json.dumps({"kind": "DescribeResult", "version": "1.0",
        "worker": {"name": "env_worker", "version": "1.0"}, "supported_versions": ["1.0"],
        "tools": [{"name": "probe", "description": "its env", "input_schema": {},
                   "effects": "none"}]}))
    sys.exit(0)
got = os.environ.get("API_KEY", "")
digest = hashlib.sha256(got.encode()).hexdigest() if got else "none"
sys.stdout.write(json.dumps({"kind": "ToolCallResult", "version": "1.0",
    "id": request["id"], "status": "ok", "output": {"type": "text", "content": digest}}))
"""


def agent(worker: Path, attached: bool = False) -> dict[str, Any]:
    return {
        "slug": "attached" if attached else "secretive",
        "provider": {"tag": "scripted", "responses": [
            {"text": "probing", "tool_calls": [
                {"id": "c1", "name": "probe", "arguments": {}}]},
            {"text": "the worker saw {{result:c1}}"}]},
        "executionMode": "asynchronous",
        "toolCallPolicyConfig": {"rules": [{"tool": "probe", "disposition": {
            "tag": "runIsolated", "attached": attached,
            "spec": {"tag": "localProcess", "argv": [sys.executable, str(worker)],
                     "env": {"API_KEY": CANARY}}}}]},
    }  # fmt: skip


class Outputs:
    def __init__(self, cwd: Path, store: Path) -> None:
        self.cwd, self.store, self.text = cwd, store, []

    def cli(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*CLI, *args], cwd=self.cwd, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "AGENTS_RUNNER_STORE":
                                                str(self.store)})  # fmt: skip
        self.text += [done.stdout, done.stderr]
        if ok:
            assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
        return done


def session_of(report: str) -> str:
    session_id: str = json.loads(report)["session_id"]
    return session_id


def test_env_values_reach_the_worker_and_nothing_else(tmp_path: Path) -> None:
    agents, store_dir = tmp_path / "agents", tmp_path / "store"
    agents.mkdir()
    store_dir.mkdir()
    worker = tmp_path / "env_worker.py"
    worker.write_text(WORKER)
    (agents / "secretive.json").write_text(json.dumps(agent(worker)))
    (agents / "attached.json").write_text(json.dumps(agent(worker, attached=True)))
    agent_file = str(agents / "secretive.json")
    store = store_dir / "state.db"
    out = Outputs(tmp_path, store)

    # By `session run-isolated`: without the agent file it refuses (naming the env,
    # running nothing); with it the worker gets the value.
    first = session_of(out.cli("run", "--agent-file", agent_file, "--prompt", "go").stdout)
    refused = out.cli("session", "run-isolated", first, ok=False)
    assert refused.returncode != 0 and "API_KEY" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    out.cli("session", "run-isolated", first, "--agent-file", agent_file)
    out.cli("session", "resume", first)

    # By `agents-runner worker --agents DIR`.
    second = session_of(out.cli("run", "--agent-file", agent_file, "--prompt", "go").stdout)
    out.cli("worker", "--agents", str(agents), "--exit-when-idle", "--poll-seconds", "0.2")

    # Attached: `run` itself runs the call, with the definition it was given.
    ran = json.loads(out.cli("run", "--agent-file", str(agents / "attached.json"), "--prompt",
                             "go", "--json").stdout)  # fmt: skip
    third = ran["session_id"]
    for sid in (first, second, third):
        out.cli("session", "show", sid)
        shown = json.loads(out.cli("session", "show", sid, "--json").stdout)
        assert shown["status"] == "completed", shown
        assert shown["final_answer"] == f"the worker saw {DIGEST}"  # it got the value
        assert shown["calls"]["c1"]["disposition"]["spec"]["env"] == {"API_KEY": "<redacted>"}
        out.cli("session", "pending", sid)
    out.cli("session", "list")
    audit = out.cli("audit", "--json", "--limit", "0").stdout
    assert audit.count('"tool":"probe"') + audit.count('"tool": "probe"') == 3, audit

    # The API and its events, over the same store.
    served = SQLiteStore(store)
    try:
        with serving(create_app(served, agents, None)) as url, httpx.Client(base_url=url) as http:
            for path in ("/v1/sessions", f"/v1/sessions/{first}",
                         f"/v1/sessions/{first}/pending"):  # fmt: skip
                answer = http.get(path)
                assert answer.status_code == 200, answer.text
                out.text.append(answer.text)
            timeout = httpx.Timeout(30, read=0.75)
            with http.stream("GET", "/v1/events", params={"after": 0}, timeout=timeout) as sse:
                lines: list[str] = []
                with contextlib.suppress(httpx.ReadTimeout):  # quiet: it has caught up
                    for line in sse.iter_lines():
                        lines.append(line)
            assert any("session.completed" in line for line in lines)
            out.text += lines
        open_files = store_bytes(store_dir)  # while a connection holds the -wal open
    finally:
        served.close()

    everything = "\n".join(out.text)
    assert DIGEST in everything  # the outputs were read (the answer names the digest)
    assert CANARY not in everything
    assert any(name.endswith("-wal") for name in open_files), sorted(open_files)
    for name, data in {**open_files, **store_bytes(store_dir)}.items():
        assert CANARY.encode() not in data, f"the value is in {name}"


def store_bytes(directory: Path) -> dict[str, bytes]:
    """Every file of the store, by name: the SQLite file, its -wal and -shm."""
    return {p.name: p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}
