"""Leases with fencing tokens in database time, and the effect ledger, on every durable
engine (the `store_engine` fixture). SQLite's own migration of them is in test_sqlite.py."""

from __future__ import annotations

import pytest

from runner.session import Session
from runner.stores.base import DurableStore, Effect, FencedOut, Lease
from tests.conftest import StoreLocations
from tests.durability.conftest import wait_for


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
