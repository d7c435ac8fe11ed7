"""Two `agents-runner serve` processes on one store (SQLite, and PostgreSQL from the
test cluster), both advancing the same sessions: every isolated call runs exactly once
(its worker records each start), and a continuation posted to either server, then again
to the other, is applied once."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

from tests.server.processes import (
    lines,
    llm_turns,
    start_serve,
    tool_results,
    wait_for_status,
    write_json,
)
from tests.server.test_restart import WORKER

SESSIONS = 20


def batch_agent(directory: Path, starts: Path) -> None:
    """One turn with an isolated `job` (recorded in `starts`) and a deferred `later`."""
    directory.mkdir()
    argv = [sys.executable, "-S", str(WORKER), str(starts)]
    write_json(directory / "batch.json", {
        "slug": "batch",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": "c1", "name": "job", "arguments": {}},
                            {"id": "c2", "name": "later", "arguments": {}}]},
            {"text": "done: {{result:c1}} / {{result:c2}}"}]},
        "tools": [{"name": "job", "kind": "external", "effects": "external",
                   "parameters": {"type": "object"}},
                  {"name": "later", "kind": "external", "parameters": {"type": "object"}}],
        "toolCallPolicyConfig": {"default": {"tag": "defer", "reason": "a person answers"},
            "rules": [{"tool": "job", "disposition": {"tag": "runIsolated", "spec": {
                "tag": "localProcess", "argv": argv, "timeoutSeconds": 120}}}]},
    })  # fmt: skip


def test_two_servers_on_one_store_run_each_call_once(tmp_path: Path, store_location: str) -> None:
    starts = tmp_path / "starts.log"
    batch_agent(tmp_path / "agents", starts)
    options = ("--no-auth", "--agents", "agents", "--poll-seconds", "0.05")
    servers = [start_serve(store_location, tmp_path, *options, name=f"serve-{n}")
               for n in (0, 1)]  # fmt: skip
    try:
        clients = [served.client() for served in servers]
        ids = []
        for n in range(SESSIONS):  # created on either; advanced by whichever loop gets it
            made = clients[n % 2].post("/v1/sessions", json={"agent": "batch.json",
                                                             "prompt": f"go {n}",
                                                             "run": "none"})  # fmt: skip
            assert made.status_code == 201, made.text
            ids.append(made.json()["session_id"])
        for n, session_id in enumerate(ids):
            waiting = wait_for_status(clients[n % 2], session_id, "waiting", "failed")
            assert waiting["calls"]["c1"]["state"] == "completed", waiting["calls"]["c1"]
            token = waiting["calls"]["c2"]["token"]
            first, other = clients[n % 2], clients[(n + 1) % 2]
            # Half resume in the request; the others are resumed by a server's loop.
            body = {"result": {"type": "text", "content": f"answer {n}"}, "resume": n % 4 < 2}
            applied = first.post(f"/v1/continuations/{token}", json=body)
            assert applied.status_code == 200 and applied.json()["status"] == "applied"
            again = other.post(f"/v1/continuations/{token}", json=body)
            assert again.status_code == 200, again.text
            assert again.json()["status"] == "already_completed"
        for n, session_id in enumerate(ids):
            done = wait_for_status(clients[(n + 1) % 2], session_id, "completed", "failed")
            assert done["state"] == "completed", done["why"]
            assert Counter(tool_results(done)) == {"c1": 1, "c2": 1}
            assert llm_turns(done) == 2
            assert done["final_answer"] == f"done: ran job {session_id}/c1 / answer {n}"
        for client in clients:
            client.close()
    finally:
        codes = [served.stop() for served in servers]
    assert codes == [0, 0], [served.stderr() for served in servers]
    assert not [served for served in servers if "Traceback" in served.stderr()]
    recorded = Counter(line.split()[0] for line in lines(starts))
    assert recorded == {f"{session_id}/c1": 1 for session_id in ids}
    # What the servers' loops say they ran adds up to the same (between them: which of
    # the two got each session is theirs to race for).
    ran = [int(n) for served in servers for n in re.findall(r"ran (\d+) call", served.stderr())]
    assert sum(ran) == SESSIONS
