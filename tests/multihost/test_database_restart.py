"""PostgreSQL restarted while three hosts work: they reconnect and finish, and no call is
lost or run twice."""

from __future__ import annotations

import pytest

from tests.multihost.conftest import Fleet, agent_document, docker, wait_for

pytestmark = pytest.mark.docker

#: Longer than the restart takes, so that no lease lapses while the database is away:
#: what is shown is reconnection, not takeover (the kill and partition tests show that).
RESTART_LEASE_S = 15.0


def test_workers_reconnect_after_a_database_restart_and_lose_nothing(fleet: Fleet):
    sessions = fleet.start_sessions(agent_document(calls=5, sleep_s=0.2), 40)
    for _ in range(3):
        fleet.start_host(lease_s=RESTART_LEASE_S)
    wait_for(
        lambda: len(fleet.effects()) >= 40,
        120,
        "the hosts are well into the work",
        detail=fleet.diagnostics,
    )
    done_before = len(fleet.effects())
    docker("restart", fleet.db)
    wait_for(
        lambda: set(fleet.statuses(sessions).values()) == {"completed"},
        180,
        "all 40 sessions completed after the restart",
        interval_s=1.0,
        detail=fleet.diagnostics,
    )
    assert done_before < 200, "the work was over before the restart; nothing was shown"
    assert fleet.unfinished_calls(sessions) == []
    keys = fleet.effects()
    expected = {f"{s}/c{i}" for s in sessions for i in range(5)}
    doubled = sorted({k for k in keys if keys.count(k) > 1})
    assert doubled == [] and set(keys) == expected and len(keys) == 200, (
        f"doubled {doubled[:5]}, missing {sorted(expected - set(keys))[:5]}"
    )
    for session_id in sessions:
        calls = fleet.store.load(session_id).calls.values()
        assert {(c.state, c.attempts) for c in calls} == {("completed", 1)}, session_id
    for host in fleet.hosts:
        assert host.state()["Running"], f"{host.name} died:\n{host.logs()[-2000:]}"
