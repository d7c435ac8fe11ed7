"""Worker daemons on one store, on each durable engine: every call runs exactly once, and
SIGTERM drains."""

from __future__ import annotations

import json
import signal

from runner.session import parse_agent, with_durable_workflows
from tests.durability.conftest import LONG_LEASE_S, Workspace, agent_document, wait_for


def test_three_workers_run_200_isolated_calls_exactly_once(ws: Workspace):
    store = ws.open_store()
    agent = with_durable_workflows(parse_agent(agent_document(ws.log, calls=10)), store)
    sessions = [agent.start("go").id for _ in range(20)]
    # A 1 s lease can lapse on a loaded 2-core machine (a takeover then turns the call in
    # flight into unknown_outcome, never a second run); a long one keeps this about counts.
    workers = [ws.popen("worker", "--concurrency", "3", "--poll-seconds", "0.05",
                        "--exit-when-idle", lease_s=LONG_LEASE_S) for _ in range(3)]  # fmt: skip
    errors = []
    for worker in workers:
        _, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err
        errors += [line for line in err.splitlines() if "Error" in line]
    assert errors == []
    keys = ws.effects()
    missing = [(s, c.id, c.state, c.result) for s in sessions
               for c in store.load(s).calls.values() if f"{s}/{c.id}" not in keys]  # fmt: skip
    assert missing == []
    assert len(keys) == 200 and len(set(keys)) == 200
    assert {store.load(s).status for s in sessions} == {"completed"}


def test_sigterm_drains_the_call_in_flight_and_exits(ws: Workspace):
    store = ws.open_store()
    agent = with_durable_workflows(parse_agent(agent_document(ws.log, sleep_s=1.5)), store)
    sid = agent.start("go").id
    worker = ws.popen("worker", "--poll-seconds", "0.05", lease_s=LONG_LEASE_S)
    wait_for(ws.started.exists, 120, "the worker starts the call")
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "draining" in err
    assert store.load(sid).status == "completed" and ws.effects() == [f"{sid}/c0"]
    assert store.lease(sid).owner == ""  # released, not left to expire
    assert json.loads(err.splitlines()[0])["message"]


def test_two_processes_racing_for_one_session_run_its_call_once(ws: Workspace):
    store = ws.open_store()
    agent = with_durable_workflows(parse_agent(agent_document(ws.log, sleep_s=0.5)), store)
    sid = agent.start("go").id
    # Long leases: a lapse on a stalled machine would be a takeover, not this race.
    racers = [ws.popen("session", "resume", sid, "--json", lease_s=LONG_LEASE_S)
              for _ in range(2)]  # fmt: skip
    outcomes = [r.communicate(timeout=120) for r in racers]
    assert all(r.returncode == 0 for r in racers), outcomes
    assert ws.effects() == [f"{sid}/c0"]
    assert store.load(sid).status == "completed"
