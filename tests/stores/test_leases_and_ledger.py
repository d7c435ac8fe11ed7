"""Leases with fencing tokens in database time, a lease taken with its session's load and
let go with its last save, and the effect ledger, on every durable engine (the
`store_engine` fixture). SQLite's own migration of them is in test_sqlite.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from runner.session import Session
from runner.state import new_token
from runner.stores import ComposedStore, CompositeStore, FileSessionStore
from runner.stores.base import (
    Continuation,
    DurableStore,
    Effect,
    FencedOut,
    Lease,
    LeasedSession,
    SessionNotFound,
    VersionConflict,
)
from tests.conftest import StoreLocations
from tests.durability.conftest import wait_for
from tests.stores.sessions import long_session


def lapse(store: DurableStore, lease: Lease) -> Lease:
    """Let `lease` run out as a stalled holder's would: renewed to a millisecond, then
    waited out in the store's own clock."""
    short = store.renew_lease(lease, 0.001)
    wait_for(lambda: store.now_ms() >= short.expires_ms, 30, "the lease lapses")
    return short


def test_a_newer_holder_fences_out_the_old_one_with_zero_rows_changed(
    store_locations: StoreLocations,
):
    # Two stores on one location: a holder and its successor are separate processes.
    store, rival = store_locations.open(), store_locations.open()
    session = store.create(Session.start("a", "h", "hi"), {"slug": "a"})
    first = store.acquire_lease(session.id, "one", ttl_s=30)
    assert first is not None and first.fencing_token >= 1 and first.takeovers == 0
    assert rival.acquire_lease(session.id, "two", ttl_s=30) is None  # held and alive
    first = lapse(store, first)  # the first holder stalls past it
    second = rival.acquire_lease(session.id, "two", ttl_s=30)
    assert second is not None
    assert second.fencing_token == first.fencing_token + 1 and second.takeovers == 1
    stale = store.load(session.id)
    stale.final_answer = "from the stale holder"
    with pytest.raises(FencedOut, match="stale"):
        store.save(stale, (first,))
    with pytest.raises(FencedOut):
        store.renew_lease(first, 30)
    with pytest.raises(FencedOut):
        store.record_effect(Effect("s/c", session.id, "c", 1, "external", "requested", None),
                            (first,))  # fmt: skip
    assert store.effect("s/c") is None
    assert store.load(session.id).version == session.version  # nothing changed
    assert rival.save(stale, (second,)).version == session.version + 1
    rival.release_lease(second)
    third = store.acquire_lease(session.id, "three", ttl_s=30)
    assert third is not None
    assert third.takeovers == 0 and third.fencing_token == second.fencing_token + 1


def test_a_lease_as_stored_renewed_and_released(durable_store: DurableStore):
    store = durable_store
    assert store.lease("s") is None  # never taken
    before = store.now_ms()
    lease = store.acquire_lease("s", "me", ttl_s=30)
    assert lease is not None and lease.name == "s" and lease.owner == "me"
    assert before + 29_000 <= lease.expires_ms  # in database time, `ttl_s` from now
    assert store.lease("s") == lease
    renewed = store.renew_lease(lease, 60)
    assert renewed.fencing_token == lease.fencing_token and renewed.expires_ms > lease.expires_ms
    assert store.lease("s") == renewed
    store.release_lease(renewed)
    released = store.lease("s")
    assert released is not None and released.owner == ""
    assert released.fencing_token == lease.fencing_token
    store.release_lease(renewed)  # releasing twice harms nothing
    again = store.acquire_lease("s", "you", ttl_s=30)
    assert again is not None and again.fencing_token == lease.fencing_token + 1


def test_one_claim_wins_among_many_stores(store_locations: StoreLocations):
    stores = [store_locations.open() for _ in range(4)]
    won = [s.acquire_lease("s", f"w{i}", ttl_s=30) for i, s in enumerate(stores)]
    assert [lease is not None for lease in won] == [True, False, False, False]


def test_the_ledger_keeps_the_latest_attempt(durable_store: DurableStore):
    store = durable_store
    store.record_effect(Effect("s/c", "s", "c", 1, "external", "requested", None))
    store.record_effect(Effect("s/c", "s", "c", 1, "completed", "completed", "{}"))
    assert store.effect("s/c") == Effect("s/c", "s", "c", 1, "completed", "completed", "{}")
    store.record_effect(Effect("s/c", "s", "c", 2, "external", "started", None))
    assert store.effect("s/c") == Effect("s/c", "s", "c", 2, "external", "started", None)
    assert store.effect("x") is None


def test_the_ledger_is_written_under_a_live_fence(durable_store: DurableStore):
    store = durable_store
    lease = store.acquire_lease("s", "me", ttl_s=30)
    assert lease is not None
    effect = Effect("s/c", "s", "c", 1, "external", "requested", None)
    store.record_effect(effect, (lease,))
    assert store.effect("s/c") == effect


# --- a lease with its load, a save with its release (LeasedSessions) ---------------------
# The same outcomes from a backend's one-round-trip ops ("fast") and from DurableStore's
# defaults made of the plain calls (a composite's, "plain").


@pytest.fixture(params=["fast", "plain"])
def leasing(request: pytest.FixtureRequest, store_locations: StoreLocations, tmp_path) -> Leasing:
    def opened() -> DurableStore:
        store = store_locations.open()
        if request.param == "fast":
            assert isinstance(store, ComposedStore) and store.parts.leased is not None
            return store
        composite = CompositeStore(store, FileSessionStore(tmp_path / "fallback"))
        assert isinstance(composite, DurableStore) and composite.parts.leased is None
        return composite

    return opened


Leasing = Callable[[], DurableStore]


def test_lease_and_load_takes_the_lease_and_loads_the_recent_part(leasing: Leasing):
    store, rival = leasing(), leasing()
    session = store.create(long_session(3), {"slug": "a"})
    taken = store.lease_and_load(session.id, "me", 30)
    assert taken is not None
    assert taken.lease == store.lease(session.id)
    assert (taken.lease.owner, taken.lease.fencing_token, taken.lease.takeovers) == ("me", 1, 0)
    assert taken.session == store.load(session.id, history=False)
    assert not taken.session.has_history and taken.session.version == session.version
    assert rival.lease_and_load(session.id, "you", 30) is None  # held and alive
    assert store.lease(session.id) == taken.lease  # the attempt changed nothing


def test_lease_and_load_of_a_missing_session_takes_no_lease(leasing: Leasing):
    store = leasing()
    with pytest.raises(SessionNotFound):
        store.lease_and_load("nobody", "me", 30)
    assert store.lease("nobody") is None
    assert store.lease_and_load_token(new_token(), "me", 30) is None  # an unknown token


def test_lease_and_load_token_finds_the_session_of_a_continuation(leasing: Leasing):
    store, rival = leasing(), leasing()
    session = store.create(long_session(2), {"slug": "a"})
    token = session.calls["wait"].token
    taken = store.lease_and_load_token(token, "me", 30)
    assert isinstance(taken, LeasedSession)
    assert taken.session.id == session.id and taken.session.call_by_token(token) is not None
    assert taken.lease == store.lease(session.id) and taken.lease.owner == "me"
    busy = rival.lease_and_load_token(token, "you", 30)
    assert busy == Continuation(token, session.id, "wait") == store.find(token)
    assert store.lease(session.id) == taken.lease


def test_save_and_release_commits_and_lets_the_lease_go(leasing: Leasing):
    store = leasing()
    session = store.create(Session.start("a", "h", "hi"), {"slug": "a"})
    taken = store.lease_and_load(session.id, "me", 30)
    assert taken is not None
    taken.session.final_answer = "done"
    stored = store.save_and_release(taken.session, taken.lease)
    assert stored.version == session.version + 1
    assert store.load(session.id).final_answer == "done"
    released = store.lease(session.id)
    assert released is not None and released.owner == ""
    assert released.fencing_token == taken.lease.fencing_token
    again = store.lease_and_load(session.id, "you", 30)  # a clean release: no takeover
    assert again is not None and again.session.version == stored.version
    assert (again.lease.fencing_token, again.lease.takeovers) == (taken.lease.fencing_token + 1, 0)


def test_a_stale_holders_save_and_release_is_fenced_out_and_changes_nothing(leasing: Leasing):
    store, rival = leasing(), leasing()
    session = store.create(Session.start("a", "h", "hi"), {"slug": "a"})
    first = store.lease_and_load(session.id, "one", 30)
    assert first is not None
    lapse(store, first.lease)  # the first holder stalls past its lease
    second = rival.lease_and_load(session.id, "two", 30)
    assert second is not None  # a takeover, counted
    assert second.lease.fencing_token == first.lease.fencing_token + 1
    assert second.lease.takeovers == 1
    first.session.final_answer = "from the stale holder"
    with pytest.raises(FencedOut, match="stale"):
        store.save_and_release(first.session, first.lease)
    assert store.load(session.id).version == session.version  # nothing written
    assert store.lease(session.id) == second.lease  # nor the newer lease released
    assert rival.save_and_release(second.session, second.lease).version == session.version + 1


def test_save_and_release_of_a_stale_read_is_a_conflict_and_keeps_the_lease(leasing: Leasing):
    store = leasing()
    session = store.create(Session.start("a", "h", "hi"), {"slug": "a"})
    taken = store.lease_and_load(session.id, "me", 30)
    assert taken is not None
    meanwhile = store.load(session.id)
    meanwhile.final_answer = "an operator's unfenced write"
    store.save(meanwhile)
    with pytest.raises(VersionConflict):
        store.save_and_release(taken.session, taken.lease)
    assert store.lease(session.id) == taken.lease  # still held: nothing changed
    assert store.load(session.id).final_answer == "an operator's unfenced write"
