"""An idle worker on PostgreSQL is woken by NOTIFY, not by its poll: with a 60 s poll
interval it still advances a session created after it went idle within seconds. (On
SQLite the same worker would wait out its poll: there, polling is the mechanism.)"""

from __future__ import annotations

import signal

import pytest

from runner.session import parse_agent, with_durable_workflows
from tests.durability.conftest import LONG_LEASE_S, Workspace, agent_document, wait_for

#: Far longer than the wait below: a worker that only polled would miss it.
POLL_S = "60"


@pytest.mark.parametrize("ws", ["postgres"], indirect=True)
def test_an_idle_worker_is_woken_by_a_new_due_session(ws: Workspace):
    store = ws.open_store()
    worker = ws.popen("worker", "--poll-seconds", POLL_S, lease_s=LONG_LEASE_S)
    try:
        # The worker's first look finds nothing; then it waits (on LISTEN) up to POLL_S.
        wait_for(lambda: store.lease("nothing") is None, 30, "the store answers")
        agent = with_durable_workflows(parse_agent(agent_document(ws.log)), store)
        first = agent.start("go").id
        wait_for(lambda: store.load(first).status == "completed", 30,
                 "the worker is woken and completes the first session")  # fmt: skip
        second = agent.start("again").id  # the worker is idle again: woken again
        wait_for(lambda: store.load(second).status == "completed", 30,
                 "the worker is woken and completes the second session")  # fmt: skip
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    assert sorted(ws.effects()) == sorted(
        f"{s}/{c}" for s in (first, second) for c in store.load(s).calls
    )
