"""A real `agents-runner serve` killed with SIGKILL while an isolated call runs, then
started again on the same store: the session completes, and the ledger decides what the
interrupted call becomes. A tool whose effects are `none` or `contained` runs again, once;
one with `external` effects goes to `unknown_outcome` and is never re-run, until an
operator posts its result (applied once: the same result again is `already_completed`).
Nothing is lost or doubled: one result per call in the conversation, one final answer."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import httpx
import pytest

from tests.server.processes import (
    Serve,
    lines,
    llm_turns,
    start_serve,
    tool_results,
    wait_for,
    wait_for_status,
    write_json,
)

WORKER = Path(__file__).resolve().parent / "recording_worker.py"
#: A killed server's lease lapses fast, so the restarted one takes over without a long wait
#: (only one server is alive at a time here, so a short lease harms nothing).
FAST_LEASES = {"AGENTS_RUNNER_LEASE_SECONDS": "1"}


def restart_agent(directory: Path, starts: Path, effects: str) -> None:
    """One call of `job` (effects as given), isolated in a local process that records
    each start in `starts` and sleeps on the first one, then a final answer."""
    directory.mkdir()
    argv = [sys.executable, "-S", str(WORKER), str(starts), "600"]
    write_json(directory / "restart.json", {
        "slug": "restart",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": "c1", "name": "job", "arguments": {"n": 1}}]},
            {"text": "done: {{result:c1}}"}]},
        "tools": [{"name": "job", "kind": "external", "effects": effects,
                   "parameters": {"type": "object"}}],
        "toolCallPolicyConfig": {"default": {"tag": "runIsolated", "spec": {
            "tag": "localProcess", "argv": argv, "timeoutSeconds": 900}}},
    })  # fmt: skip


def serve(tmp_path: Path) -> Serve:
    return start_serve(str(tmp_path / "state.db"), tmp_path, "--no-auth", "--agents", "agents",
                       "--poll-seconds", "0.05", env=FAST_LEASES)  # fmt: skip


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("effects", ["none", "contained", "external"])
def test_a_server_killed_mid_call_recovers_on_restart(tmp_path: Path, effects: str) -> None:
    starts = tmp_path / "starts.log"
    restart_agent(tmp_path / "agents", starts, effects)
    first = serve(tmp_path)
    try:
        with first.client() as http:
            made = http.post(
                "/v1/sessions", json={"agent": "restart.json", "prompt": "go", "run": "none"}
            )  # the worker runs it
            assert made.status_code == 201, made.text
        session_id = made.json()["session_id"]
        wait_for(lambda: lines(starts), what="the worker started")  # the server is mid-call
    finally:
        assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    (started,) = lines(starts)
    key, attempt, pid = started.split()
    assert (key, attempt) == (f"{session_id}/c1", "1")

    second = serve(tmp_path)
    try:
        # The killed server's worker is an orphan: the new server's sweep ends it.
        wait_for(lambda: not alive(int(pid)), what="the orphaned worker swept")
        with second.client() as http:
            if effects == "external":
                session = settle_by_hand(http, session_id)
                assert [line.split()[:2] for line in lines(starts)] == [[key, "1"]]
            else:
                session = wait_for_status(http, session_id, "completed", "failed")
                assert [line.split()[:2] for line in lines(starts)] == [[key, "1"], [key, "2"]]
                assert session["calls"]["c1"]["attempts"] == 2
                assert session["final_answer"] == f"done: ran job {key}"
    finally:
        assert second.stop() == 0, second.stderr()
    assert "Traceback" not in second.stderr()
    assert session["state"] == "completed"
    assert tool_results(session) == ["c1"]
    assert llm_turns(session) == 2


def settle_by_hand(http: httpx.Client, session_id: str) -> dict:
    """The external call is unknown_outcome (never re-run); an operator posts its result
    with resume, and posting it again changes nothing."""
    wait_for(lambda: http.get(f"/v1/sessions/{session_id}").json()["calls"]["c1"]["state"]
             == "unknown_outcome", what="the call in unknown_outcome")  # fmt: skip
    shown = http.get(f"/v1/sessions/{session_id}").json()
    assert "unknown_outcome" in shown["conditions"], shown["conditions"]
    token = shown["calls"]["c1"]["token"]
    result = {"type": "text", "content": "checked by hand"}
    applied = http.post(f"/v1/continuations/{token}", json={"result": result, "resume": True})
    assert applied.status_code == 200, applied.text
    assert applied.json()["status"] == "applied"
    again = http.post(f"/v1/continuations/{token}", json={"result": result, "resume": True})
    assert again.status_code == 200 and again.json()["status"] == "already_completed"
    other = http.post(f"/v1/continuations/{token}", json={"result": "something else"})
    assert other.status_code == 409, other.text
    session = wait_for_status(http, session_id, "completed", "failed")
    assert session["final_answer"] == "done: checked by hand"
    return session
