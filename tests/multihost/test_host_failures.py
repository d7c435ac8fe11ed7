"""A host killed, a host cut off from the network, a host whose clock is wrong: the
external call runs at most once, and what is decided by time is decided by the database."""

from __future__ import annotations

import time

import pytest

from tests.multihost.conftest import LEASE_S, Fleet, Host, agent_document, docker, wait_for

pytestmark = pytest.mark.docker

#: Long enough that the call is surely still running when the test strikes.
SLOW_S = 8.0
#: Longer than a lease, so that the call is still running when its host's lease lapses.
PARTITIONED_CALL_S = 2 * LEASE_S


def call_state(fleet: Fleet, session_id: str) -> str:
    return fleet.store.load(session_id, history=False).calls["c0"].state


def holding_host(fleet: Fleet, session_id: str) -> Host:
    """The host running the session's slow call (it noted its start), by its lease."""
    wait_for(
        lambda: fleet.started() and fleet.holder(session_id),
        60,
        f"a host starts the slow call of {session_id}",
        detail=fleet.diagnostics,
    )
    host = fleet.holder(session_id)
    assert host is not None
    return host


def barrier(fleet: Fleet) -> None:
    """A quick session run to its end: the live hosts have polled since the strike, so a
    second run of the slow call, had there been one, has started by now."""
    (quick,) = fleet.start_sessions(agent_document(calls=1), 1)
    wait_for(
        lambda: fleet.statuses([quick])[quick] == "completed",
        60,
        "a later session completes",
        detail=fleet.diagnostics,
    )
    assert fleet.effects().count(f"{quick}/c0") == 1


def test_a_killed_host_s_call_is_taken_over_and_never_runs_twice(fleet: Fleet):
    hosts = [fleet.start_host() for _ in range(3)]
    (session_id,) = fleet.start_sessions(agent_document(sleep_s=SLOW_S), 1)
    victim = holding_host(fleet, session_id)
    docker("kill", victim.name)
    # Its lease lapses (in database time) and another host takes the session over: the
    # external call was started and never recorded as ended, so it is unknown_outcome.
    wait_for(
        lambda: call_state(fleet, session_id) != "running",
        60,
        "the killed host's call is taken over",
        detail=fleet.diagnostics,
    )
    taker = fleet.store.lease(session_id)
    key = f"{session_id}/c0"
    state = call_state(fleet, session_id)
    assert state in ("unknown_outcome", "completed"), state
    barrier(fleet)
    assert len(fleet.started()) == 1, f"the slow call started again: {fleet.started()}"
    # Once, or in unknown_outcome (the kill took its worker with it, or came after it
    # appended and before the host committed), never twice.
    count = fleet.effects().count(key)
    assert count == 1 if state == "completed" else count <= 1, (state, fleet.effects())
    effect = fleet.store.effect(key)
    assert effect is not None and effect.attempt == 1, effect
    assert taker is None or not taker.owner.startswith(f"{victim.hostname}:"), taker
    others = [h for h in hosts if h is not victim]
    assert all(h.state()["Running"] for h in others)
    # The operator's view shows why, and says what to do.
    shown = fleet.cli("session", "show", session_id)
    assert shown["calls"]["c0"]["state"] == state
    if state == "unknown_outcome":
        assert "unknown_outcome" in shown["conditions"]


def test_a_partitioned_host_s_late_commit_is_fenced_out_and_it_carries_on(fleet: Fleet):
    hosts = [fleet.start_host() for _ in range(2)]
    # The call outlasts the lease but ends while its host is cut off, so that the host
    # has a result to commit when it is back.
    (session_id,) = fleet.start_sessions(agent_document(sleep_s=PARTITIONED_CALL_S), 1)
    cut = holding_host(fleet, session_id)
    other = next(h for h in hosts if h is not cut)
    held = fleet.store.lease(session_id)
    assert held is not None
    key = f"{session_id}/c0"

    def taken_over() -> bool:
        lease = fleet.store.lease(session_id)
        newer = lease is not None and lease.fencing_token > held.fencing_token
        return newer and call_state(fleet, session_id) != "running"

    docker("network", "disconnect", fleet.network, cut.name)
    try:
        # The other host takes over once the cut-off host's lease lapsed (database time);
        # the cut-off host's call meanwhile has its effect (the shared directory is no
        # network), and its commit cannot reach the database.
        wait_for(taken_over, 60, "the other host takes the session over", detail=fleet.diagnostics)
        wait_for(
            lambda: fleet.effects().count(key) == 1,
            60,
            "the cut-off host's call ends",
            detail=fleet.diagnostics,
        )
    finally:
        docker("network", "connect", fleet.network, cut.name)
    assert call_state(fleet, session_id) == "unknown_outcome"
    # Back on the network, its late commit (and renewal) carry the old fencing token: the
    # store refuses them, and the host says so.
    wait_for(
        lambda: "is stale" in cut.logs(),
        90,
        f"{cut.hostname} reports its late commit refused",
        detail=fleet.diagnostics,
    )
    session = fleet.store.load(session_id)
    assert session.calls["c0"].state == "unknown_outcome", session.calls["c0"]
    assert fleet.effects().count(key) == 1 and len(fleet.started()) == 1
    # It carries on: with the other host stopped, new work is done by it alone.
    docker("stop", other.name)
    later = fleet.start_sessions(agent_document(calls=3), 3)
    wait_for(
        lambda: set(fleet.statuses(later).values()) == {"completed"},
        90,
        f"{cut.hostname} completes new sessions after the partition",
        interval_s=0.5,
        detail=fleet.diagnostics,
    )
    assert set(later) <= cut.completed_sessions()
    for session_id_later in later:
        for i in range(3):
            assert fleet.effects().count(f"{session_id_later}/c{i}") == 1
    state = cut.state()
    assert state["Running"] and state["ExitCode"] == 0, state
    assert fleet.effects().count(key) == 1


def test_a_host_an_hour_ahead_changes_nothing(fleet: Fleet):
    ahead = fleet.start_host(
        env={"LD_PRELOAD": "/usr/local/lib/libfaketime.so.1", "FAKETIME": "+1h"}
    )
    normal = fleet.start_host()
    # Many slow calls at once on both hosts: had a host judged leases by its own clock,
    # the one ahead would see every lease of the other as lapsed an hour ago and take it
    # (turning calls in flight into unknown_outcome, or running them twice).
    sessions = fleet.start_sessions(agent_document(calls=2, sleep_s=1.0, log="bulk.log"), 12)
    wait_for(
        lambda: set(fleet.statuses(sessions).values()) == {"completed"},
        120,
        "all sessions completed",
        interval_s=0.5,
        detail=fleet.diagnostics,
    )
    assert fleet.unfinished_calls(sessions) == []
    keys = fleet.effects("bulk.log")
    assert sorted(keys) == sorted(f"{s}/c{i}" for s in sessions for i in range(2))
    for session_id in sessions:
        assert {c.attempts for c in fleet.store.load(session_id).calls.values()} == {1}
    assert ahead.completed_sessions() and normal.completed_sessions(), fleet.diagnostics()
    # The worker's own clock really is an hour ahead (its log lines carry time.time()).
    stamps = [line["ts"] for line in ahead.log_lines()]
    assert stamps and min(stamps) - time.time() > 3000, stamps[:3]
    # And the other way: the host ahead holds a call and dies. Had it written its lease
    # expiry by its own clock, the other host would wait an hour to take over.
    docker("stop", normal.name)
    (slow,) = fleet.start_sessions(agent_document(sleep_s=SLOW_S), 1)
    assert holding_host(fleet, slow) is ahead
    lease = fleet.store.lease(slow)
    assert lease is not None
    assert lease.expires_ms - fleet.store.now_ms() <= LEASE_S * 1000 + 1000, lease
    # What decides when the session is due again is database time too.
    written = fleet.store.load(slow, history=False).updated_ms
    skew_s = (written - fleet.store.now_ms()) / 1000
    assert abs(skew_s) < 60, f"the host ahead stamped the session {skew_s:+.0f}s off"
    docker("start", normal.name)
    docker("kill", ahead.name)
    wait_for(
        lambda: call_state(fleet, slow) != "running",
        60,
        "the normal host takes over the call of the host ahead",
        detail=fleet.diagnostics,
    )
    assert call_state(fleet, slow) == "unknown_outcome"
    assert fleet.effects().count(f"{slow}/c0") == 0
