"""The crash matrix: the real CLI killed with SIGKILL at named points (or paused with
SIGSTOP, or held at a barrier), then recovered. Each test asserts the invariant (how
often the external effect happened, what the ledger and the session say), not only that
something finished. Every scenario runs on each durable engine (`ws`: sqlite, postgres)
from this one test code. Scenario 3 in Docker is in test_crash_docker.py."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.durability.conftest import LONG_LEASE_S, Workspace, agent_document, wait_for

KILLED = -signal.SIGKILL


def test_1_killed_after_the_llm_response_the_step_runs_again_once(ws: Workspace):
    sid = ws.start(agent_document(ws.log))
    ws.cli("session", "resume", sid, crash_at="llm.response", code=KILLED)
    assert ws.effects() == []
    final = ws.js("session", "resume", sid)
    assert final["status"] == "completed" and ws.effects() == [f"{sid}/c0"]


def test_2_killed_after_ledger_requested_the_call_is_dispatched_exactly_once(ws: Workspace):
    sid = ws.start(agent_document(ws.log))
    ws.cli("session", "resume", sid, crash_at="ledger.requested", code=KILLED)
    assert ws.effects() == []
    assert ws.js("session", "resume", sid)["status"] == "completed"
    assert ws.effects() == [f"{sid}/c0"]


def test_4_killed_after_the_worker_finished_the_recorded_outcome_is_used(ws: Workspace):
    sid = ws.start(agent_document(ws.log))
    ws.cli("session", "resume", sid, crash_at="ledger.completed", code=KILLED)
    assert ws.effects() == [f"{sid}/c0"]
    final = ws.js("session", "resume", sid)
    assert final["status"] == "completed" and "charged" in final["final_answer"]
    assert ws.effects() == [f"{sid}/c0"]  # not repeated


@pytest.mark.parametrize("effects", ["external", "contained"])
def test_3_killed_while_the_local_worker_runs(ws: Workspace, effects: str):
    sid = ws.start(agent_document(ws.log, effects=effects, sleep_s=3))
    runner = ws.popen("session", "resume", sid)
    wait_for(ws.started.exists)
    worker_pid = int(ws.started.read_text().split()[0])
    runner.send_signal(signal.SIGKILL)
    runner.wait(timeout=30)
    report = ws.js("session", "resume", sid)  # takes over, sweeps the orphan, recovers
    wait_for(lambda: not os.path.exists(f"/proc/{worker_pid}"), 60, "the orphan is swept")
    if effects == "external":
        assert report["status"] == "waiting" and ws.effects() == []
        shown = ws.js("session", "show", sid)
        assert shown["calls"]["c0"]["state"] == "unknown_outcome"
        assert "unknown_outcome" in shown["conditions"] and "retry" in shown["why"]
        listed = ws.js("session", "list", "--status", "unknown_outcome")["sessions"]
        assert [s["id"] for s in listed] == [sid]
        token = shown["calls"]["c0"]["token"]
        refused = ws.cli("session", "retry", token, code=2)
        assert "--force" in refused.stderr
        ws.js("session", "retry", token, "--force")
        assert ws.js("session", "resume", sid)["status"] == "completed"
        assert ws.effects() == [f"{sid}/c0"]
    else:
        assert report["status"] == "completed" and ws.effects() == [f"{sid}/c0"]


def pause_outside_a_transaction(process: subprocess.Popen[str], ws: Workspace) -> None:
    """SIGSTOP the process at a moment it is inside no transaction on the store (it may
    have been inside a lease renewal): otherwise its successor would wait on its lock,
    not on the lease."""
    for _ in range(100):
        process.send_signal(signal.SIGSTOP)
        wait_for(lambda: Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1]
                 .split()[0] == "T", 30, "the process stops")  # fmt: skip
        if ws.idle():
            return
        process.send_signal(signal.SIGCONT)  # let it finish that transaction
        time.sleep(0.05)
    pytest.fail("the process was always inside a transaction on the store when stopped")


def history(shown: dict) -> tuple[int, list, dict]:
    return shown["version"], shown["turns"], shown["calls"]


@pytest.mark.parametrize("ws", ["sqlite", "composite", "postgres"], indirect=True)
def test_5_a_holder_paused_past_its_lease_changes_nothing_when_it_wakes(ws: Workspace):
    sid = ws.start(agent_document(ws.log, sleep_s=0.5))
    store = ws.open_store()
    first = ws.popen("session", "resume", sid, lease_s="2")
    wait_for(ws.started.exists, what="the first holder hands the call to its worker")
    pause_outside_a_transaction(first, ws)
    try:
        stale = store.lease(sid)
        wait_for(lambda: store.lease(sid).expires_ms <= store.now_ms(), 60, "the lease lapses")
        as_left = ws.js("session", "show", sid)
        assert as_left["calls"]["c0"]["state"] == "running" and "stuck" in as_left["conditions"]
        # The successor takes over with a newer token; the call was handed to a worker
        # with external effects and its outcome was never recorded: unknown_outcome.
        taken = ws.js("session", "resume", sid, lease_s=LONG_LEASE_S)
        assert taken["status"] == "waiting"
        after_takeover = ws.js("session", "show", sid)
        assert after_takeover["calls"]["c0"]["state"] == "unknown_outcome"
        assert store.lease(sid).fencing_token == stale.fencing_token + 1
        ledger = store.effect(f"{sid}/c0")
    finally:
        first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=120)
    # Woken, the first holder gets its worker's answer and tries to record it: refused.
    assert first.returncode == 1 and "is stale" in err and "Traceback" not in err, err
    assert history(ws.js("session", "show", sid)) == history(after_takeover)
    assert store.effect(f"{sid}/c0") == ledger and ledger.state == "started"
    assert store.lease(sid).fencing_token == stale.fencing_token + 1
    assert ws.effects() == [f"{sid}/c0"]  # the worker ran once, and nobody ran it again
    # The operator settles it; the history is one chain: each version extends the last.
    (ws.root / "r.json").write_text('"charged once"')
    ws.js("session", "complete", after_takeover["calls"]["c0"]["token"], "r.json")
    final = ws.js("session", "resume", sid)
    assert final["final_answer"] == "done charged once" and ws.effects() == [f"{sid}/c0"]
    chain = [history(as_left), history(after_takeover), history(ws.js("session", "show", sid))]
    for (version, turns, _), (later, later_turns, _) in itertools.pairwise(chain):
        # (the last turn of an earlier version may be a partial one that was folded since)
        assert later > version and later_turns[: len(turns) - 1] == turns[:-1]


def test_6_two_workers_claiming_one_call_at_the_same_instant_run_it_once(ws: Workspace):
    sid = ws.start(agent_document(ws.log))
    barrier = ws.root / "barrier"
    barrier.mkdir()
    workers = [ws.popen("worker", "--poll-seconds", "0.05", "--exit-when-idle",
                        lease_s=LONG_LEASE_S, barrier=f"lease.acquire:{barrier}")
               for _ in range(2)]  # fmt: skip
    # Both stand at the claim, then go at once: the claim is the only thing deciding.
    wait_for(lambda: len(list(barrier.glob("arrived.*"))) == 2, 120, "both reach the claim")
    (barrier / "go").touch()
    logs = [w.communicate(timeout=120)[1] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], logs
    assert ws.effects() == [f"{sid}/c0"]
    assert sorted("ran 1 call" in log for log in logs) == [False, True], logs
    store = ws.open_store()
    assert store.lease(sid).fencing_token == 1  # one claim ever succeeded
    assert store.load(sid).status == "completed"


def test_7_duplicate_and_conflicting_completion_of_an_unknown_outcome(ws: Workspace):
    sid = ws.start(agent_document(ws.log, sleep_s=3))
    runner = ws.popen("session", "resume", sid)
    wait_for(ws.started.exists)
    runner.send_signal(signal.SIGKILL)
    runner.wait(timeout=30)
    ws.js("session", "resume", sid)
    token = ws.js("session", "show", sid)["calls"]["c0"]["token"]
    (ws.root / "r.json").write_text('{"charged": true}')
    (ws.root / "other.json").write_text('{"charged": false}')
    first = ws.js("session", "complete", token, str(ws.root / "r.json"))
    assert first["applied"] == [token]
    again = ws.js("session", "complete", token, str(ws.root / "r.json"))
    assert again["applied"] == [] and again["already_completed"] == [token]
    refused = ws.cli("session", "complete", token, str(ws.root / "other.json"), code=1)
    assert "different result" in refused.stderr
    final = ws.js("session", "resume", sid)
    assert final["final_answer"] == 'done {"charged": true}' and ws.effects() == []


def test_8_a_result_after_expiry_stays_expired_and_is_kept_as_late(ws: Workspace):
    document = agent_document(ws.log)
    document["toolCallPolicyConfig"]["default"] = {"tag": "defer", "reason": "approval",
                                                   "expiresAfterSeconds": 1}  # fmt: skip
    sid = ws.start(document)
    assert ws.js("session", "resume", sid)["status"] == "waiting"
    call = ws.js("session", "show", sid)["calls"]["c0"]
    store = ws.open_store()
    wait_for(lambda: store.now_ms() > call["expires_ms"], 60, "the call's expiry passes")
    (ws.root / "r.json").write_text('"approved"')
    for _ in range(2):  # each late result is kept; neither revives the call
        late = ws.js("session", "complete", call["token"], "r.json")
        assert late["late"] == [call["token"]] and late["applied"] == []
    shown = ws.js("session", "show", sid)
    assert shown["calls"]["c0"]["state"] == "expired"
    assert [r["result"]["content"] for r in shown["late_results"]] == ["approved", "approved"]
    listed = ws.js("session", "list", "--status", "expired")["sessions"]
    assert [s["id"] for s in listed] == [sid]
    final = ws.js("session", "resume", sid)["final_answer"]
    assert final.startswith("done [expired EXPIRED] no result arrived within 1s"), final
    assert ws.js("session", "show", sid)["calls"]["c0"]["state"] == "expired"


def test_9_killed_during_retry_backoff_attempts_never_exceed_the_budget(ws: Workspace):
    # A worker that always fails with a retryable error: 1 + 2 retries = 3 attempts.
    document = agent_document(ws.log, decorators=[{"tag": "retries", "count": 2,
                                                   "backoffMs": 50}])  # fmt: skip
    document["toolCallPolicyConfig"]["default"]["inner"]["spec"]["argv"][2:] = [
        str(ws.root / "unavailable.py")]  # fmt: skip
    (ws.root / "unavailable.py").write_text(
        "import json, sys\nr = json.loads(sys.stdin.read())\n"
        f"open({str(ws.log)!r}, 'a').write(r['context']['idempotency_key'] + '\\n')\n"
        "print(json.dumps({'kind': 'ToolCallResult', 'version': '1.0', 'id': r['id'],"
        " 'status': 'error', 'error': {'code': 'UNAVAILABLE', 'message': 'down',"
        " 'retryable': True}}))\n"
        "sys.exit(1)\n"
    )
    sid = ws.start(document)
    kills = 0
    while True:
        done = ws.cli("session", "resume", sid, "--json", crash_at="retry.backoff", code=None)
        if done.returncode != KILLED:
            break
        kills += 1
        assert kills <= 5
    shown = ws.js("session", "show", sid)
    call = shown["calls"]["c0"]
    assert kills == 2 and len(ws.effects()) == 3 and call["attempts"] == 3, (call, done.stdout)
    assert call["state"] == "failed" and call["result"]["error_code"] == "UNAVAILABLE"
    assert shown["status"] == "completed"


def test_10_a_poison_session_is_quarantined_after_the_bound(ws: Workspace):
    sid = ws.start(agent_document(ws.log))
    kills = 0
    while True:
        done = ws.cli("session", "resume", sid, "--json", crash_at="llm.response", code=None)
        if done.returncode != KILLED:
            break
        kills += 1
        assert kills <= 5
    assert kills == 3 and done.returncode == 2 and "is quarantined" in done.stderr
    shown = ws.js("session", "show", sid)
    assert shown["status"] == "quarantined" and "3 holders in a row died" in shown["why"]
    listed = ws.js("session", "list", "--status", "quarantined")["sessions"]
    assert [s["id"] for s in listed] == [sid]
    final = ws.js("session", "resume", sid, "--unquarantine")
    assert final["status"] == "completed" and ws.effects() == [f"{sid}/c0"]


def test_11_a_changed_agent_is_refused_by_name(ws: Workspace):
    document = agent_document(ws.log)
    document["toolCallPolicyConfig"]["default"] = {"tag": "defer", "reason": "later"}
    sid = ws.start(document)
    assert ws.js("session", "resume", sid)["status"] == "waiting"
    changed = {**document, "systemPrompt": "be brief"}
    changed["system_prompt"] = "be brief"
    del changed["systemPrompt"]
    (ws.root / "v2.json").write_text(__import__("json").dumps(changed))
    refused = ws.cli("session", "resume", sid, "--agent-file", "v2.json", code=2)
    assert "changed: system_prompt" in refused.stderr and "--allow-agent-change" in refused.stderr
    ws.js("session", "resume", sid, "--agent-file", "v2.json", "--allow-agent-change")
    ws.js("session", "resume", sid)  # the session now runs the new definition


def test_12_killed_inside_store_commits_many_times(ws: Workspace):
    sid = ws.start(agent_document(ws.log, effects="contained", calls=3))
    for nth in range(1, 9):  # every transaction in turn, each killed before COMMIT
        # (these kills are not poison: --unquarantine keeps the session going)
        ws.cli("session", "resume", sid, "--unquarantine", crash_at=f"store.commit@{nth}",
               code=None)  # fmt: skip
        ws.check_integrity()
        shown = ws.js("session", "show", sid)
        kinds = [t["kind"] for t in shown["turns"]]
        assert kinds in (["user"], ["user", "llm", "partial_user"],
                         ["user", "llm", "user"], ["user", "llm", "user", "llm"])  # fmt: skip
        if kinds[-1] == "user" and len(kinds) == 3:  # a whole turn of results, never part
            assert len(shown["turns"][2]["tool_results"]) == 3
    final = ws.js("session", "resume", sid, "--unquarantine")
    assert final["status"] == "completed"
    assert sorted(set(ws.effects())) == [f"{sid}/c{i}" for i in range(3)]


def test_13_completed_deferred_calls_are_kept_after_a_kill(ws: Workspace):
    document = agent_document(ws.log, calls=3)
    document["toolCallPolicyConfig"]["default"] = {"tag": "defer", "reason": "later"}
    sid = ws.start(document)
    ws.js("session", "resume", sid)
    tokens = {c: v["token"] for c, v in ws.js("session", "show", sid)["calls"].items()}
    (ws.root / "r.json").write_text('"R"')
    ws.js("session", "complete", tokens["c0"], "r.json")
    ws.cli("session", "complete", tokens["c1"], "r.json", crash_at="store.commit", code=KILLED)
    pending = ws.js("session", "pending", sid)["calls"]
    assert {p["tool_call_id"] for p in pending} == {"c1", "c2"}  # c0 is kept, never asked for
    for call in ("c1", "c2"):
        ws.js("session", "complete", tokens[call], "r.json")
    assert ws.js("session", "resume", sid)["final_answer"] == "done R R R"
