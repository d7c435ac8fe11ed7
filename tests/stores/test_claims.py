"""Claims on every durable engine: deferred calls leased to external workers, fenced by
their tokens, swept when the lease lapses (released, or unknown_outcome for a tool with
external effects). Sessions are real: a scripted agent run to its first wait."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from functools import partial

import anyio
import psycopg
import pytest

from runner.session import (
    DurableAgent,
    Session,
    ToolResult,
    parse_agent,
    with_durable_workflows,
)
from runner.session.claims import sweep_claims
from runner.stores import (
    Claim,
    ClaimLost,
    CompositeStore,
    DurableStore,
    FileSessionStore,
    PostgresStore,
    SQLiteStore,
)
from runner.stores import sqlite as sqlite_schema
from runner.stores.postgres import schema as postgres_schema
from tests.conftest import StoreLocations
from tests.stores.sessions import long_session

#: Two deferred calls: `lookup` (no effects: handed out again when a claim lapses) and
#: `charge` (external effects: its call goes to unknown_outcome instead).
AGENT = {
    "slug": "claims",
    "provider": {"tag": "scripted", "responses": [
        {"text": "go", "tool_calls": [
            {"id": "c_lookup", "name": "lookup", "arguments": {"q": "stock"}},
            {"id": "c_charge", "name": "charge", "arguments": {"cents": 250}}]},
        {"text": "done: {{result:c_lookup}} {{result:c_charge}}"}]},
    "executionMode": "asynchronous",
    "tools": [{"name": "lookup", "kind": "external", "effects": "none"},
              {"name": "charge", "kind": "external", "effects": "external"}],
    "toolCallPolicyConfig": {"default": {"tag": "defer", "reason": "an external worker"}},
}  # fmt: skip


def agent_for(store: DurableStore) -> DurableAgent:
    return with_durable_workflows(parse_agent(AGENT), store)


def waiting_session(store: DurableStore) -> str:
    report = anyio.run(agent_for(store).run, "go")
    assert report.session.status == "waiting"
    return report.session.id


def lapse(store: DurableStore, claim: Claim) -> None:
    """Wait (store time) until the claim's lease has lapsed."""
    while store.now_ms() <= claim.expires_ms:
        time.sleep(0.01)


def call_state(store: DurableStore, session_id: str, call_id: str) -> str:
    return store.load(session_id).calls[call_id].state


def test_a_claim_hands_out_the_call_once(durable_store: DurableStore):
    session_id = waiting_session(durable_store)
    [claim] = durable_store.claim_calls(["lookup"], "w1", 30, 10)
    assert (claim.session_id, claim.call_id, claim.tool, claim.claimer, claim.state) == (
        session_id, "c_lookup", "lookup", "w1", "held")  # fmt: skip
    assert claim.call is not None and claim.call.arguments == {"q": "stock"}
    assert claim.continuation == claim.call.token
    assert claim.lease_ms == 30_000
    assert claim.expires_ms - durable_store.now_ms() <= 30_000
    assert durable_store.claim_calls(["lookup"], "w2", 30, 10) == []
    assert durable_store.claim(claim.token) == Claim(
        claim.token, session_id, "c_lookup", "lookup", "w1", "held", claim.expires_ms,
        30_000, claim.continuation)  # fmt: skip
    assert durable_store.claim("no-such-token") is None
    # Only the tools asked for; `max` bounds how many.
    assert durable_store.claim_calls(["other"], "w1", 30, 10) == []
    assert durable_store.claim_calls([], "w1", 30, 10) == []


def test_claims_come_oldest_first_and_limit_bounds_them(durable_store: DurableStore):
    first, second = waiting_session(durable_store), waiting_session(durable_store)
    claims = durable_store.claim_calls(["lookup", "charge"], "w", 30, 3)
    assert [(c.session_id, c.call_id) for c in claims] == [
        (first, "c_lookup"), (first, "c_charge"), (second, "c_lookup")]  # fmt: skip
    assert len({c.token for c in claims}) == 3


def race(claimers: list[Callable[[], list[Claim]]]) -> list[list[Claim]]:
    """Run the claimers in threads, released at once; what each got."""
    barrier = threading.Barrier(len(claimers))
    got: list[list[Claim]] = [[] for _ in claimers]

    def run(n: int) -> None:
        barrier.wait()
        got[n] = claimers[n]()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(claimers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return got


def test_two_claimers_racing_for_one_call_one_wins(store_locations: StoreLocations):
    stores = [store_locations.open(), store_locations.open()]
    for _ in range(5):
        session_id = waiting_session(stores[0])
        won = race([partial(s.claim_calls, ["charge"], f"w{n}", 30, 10)
                    for n, s in enumerate(stores)])  # fmt: skip
        assert sorted(len(w) for w in won) == [0, 1], won  # exactly one winner
        [claim] = won[0] + won[1]
        assert (claim.session_id, claim.call_id) == (session_id, "c_charge")
        assert stores[0].claim(claim.token) == stores[1].claim(claim.token)


def test_many_claimers_never_share_a_call(store_locations: StoreLocations):
    stores = [store_locations.open(), store_locations.open()]
    sessions = [waiting_session(stores[0]) for _ in range(6)]
    barrier = threading.Barrier(8)
    taken: list[Claim] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        barrier.wait()
        while got := stores[n % 2].claim_calls(["lookup", "charge"], f"w{n}", 30, 1):
            with lock:
                taken.extend(got)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    keys = sorted((c.session_id, c.call_id) for c in taken)
    assert keys == sorted((s, c) for s in sessions for c in ("c_lookup", "c_charge"))


def test_a_lapsed_claim_is_released_and_the_old_token_is_refused(durable_store: DurableStore):
    session_id = waiting_session(durable_store)
    [old] = durable_store.claim_calls(["lookup"], "w1", 0.05, 1)
    # Lapsed but not yet swept: not handed out again (the sweep decides first).
    lapse(durable_store, old)
    assert durable_store.claim_calls(["lookup"], "w2", 30, 1) == []
    assert anyio.run(sweep_claims, durable_store) == 1
    released = durable_store.claim(old.token)
    assert released is not None and released.state == "released"
    assert call_state(durable_store, session_id, "c_lookup") == "deferred"
    [new] = durable_store.claim_calls(["lookup"], "w2", 30, 1)
    assert (new.session_id, new.call_id) == (old.session_id, old.call_id)
    assert new.token != old.token
    for refused in (lambda: durable_store.renew_claim(old.token, 30),
                    lambda: durable_store.finish_claim(old.token)):  # fmt: skip
        with pytest.raises(ClaimLost) as caught:
            refused()
        assert caught.value.state is None and "claimed again" in str(caught.value)
    # Nothing changed for the new holder.
    assert durable_store.claim(new.token) == Claim(
        new.token, session_id, "c_lookup", "lookup", "w2", "held", new.expires_ms, 30_000,
        new.continuation)  # fmt: skip
    assert durable_store.claim(old.token) is None
    assert anyio.run(sweep_claims, durable_store) == 0


def test_heartbeats_extend_a_claim(durable_store: DurableStore):
    waiting_session(durable_store)
    [claim] = durable_store.claim_calls(["lookup"], "w1", 0.05, 1)
    renewed = durable_store.renew_claim(claim.token, 60)
    assert renewed.state == "held" and renewed.lease_ms == 60_000
    assert renewed.expires_ms >= claim.expires_ms + 59_000
    again = durable_store.renew_claim(claim.token)  # by the lease it has
    assert again.lease_ms == 60_000 and again.expires_ms >= renewed.expires_ms
    assert durable_store.lapsed_claims(10) == []
    # A released claim nobody took again is the holder's once more.
    short = durable_store.renew_claim(claim.token, 0.05)
    lapse(durable_store, short)
    assert anyio.run(sweep_claims, durable_store) == 1
    back = durable_store.renew_claim(claim.token, 30)
    assert back.state == "held"
    assert durable_store.claim_calls(["lookup"], "w2", 30, 1) == []


def test_a_lapsed_claim_of_a_tool_with_external_effects_goes_to_unknown_outcome(
    durable_store: DurableStore,
):
    session_id = waiting_session(durable_store)
    [claim] = durable_store.claim_calls(["charge"], "w1", 0.05, 1)
    lapse(durable_store, claim)
    assert anyio.run(sweep_claims, durable_store) == 1
    assert durable_store.claim(claim.token).state == "lapsed"  # type: ignore[union-attr]
    session = durable_store.load(session_id)
    call = session.calls["c_charge"]
    assert call.state == "unknown_outcome" and call.result is not None
    assert call.result.error_code == "UNKNOWN_OUTCOME" and "'w1'" in call.result.content
    assert durable_store.claim_calls(["charge"], "w2", 30, 1) == []  # never handed out again
    with pytest.raises(ClaimLost) as caught:
        durable_store.renew_claim(claim.token, 30)
    assert caught.value.state == "lapsed"
    assert anyio.run(sweep_claims, durable_store) == 0
    # The holder's late result settles it.
    assert durable_store.finish_claim(claim.token).state == "done"
    report = anyio.run(agent_for(durable_store).complete_calls, session_id,
                       [(claim.continuation, ToolResult.ok("charged"))])  # fmt: skip
    assert report.applied == (claim.continuation,)
    assert call_state(durable_store, session_id, "c_charge") == "completed"


def test_a_forced_retry_hands_a_lapsed_external_call_out_again(durable_store: DurableStore):
    session_id = waiting_session(durable_store)
    [claim] = durable_store.claim_calls(["charge"], "w1", 0.05, 1)
    lapse(durable_store, claim)
    anyio.run(sweep_claims, durable_store)
    assert call_state(durable_store, session_id, "c_charge") == "unknown_outcome"
    retry = partial(agent_for(durable_store).retry, session_id, claim.continuation, force=True)
    session = anyio.run(retry)
    assert session.calls["c_charge"].state == "deferred"  # not ready: no step runs it
    assert session.calls["c_charge"].result is None
    [again] = durable_store.claim_calls(["charge"], "w2", 30, 1)
    assert again.call_id == "c_charge" and again.token != claim.token
    with pytest.raises(ClaimLost):
        durable_store.finish_claim(claim.token)  # the first holder's token is dead
    assert anyio.run(sweep_claims, durable_store) == 0  # nothing lapsed: not moved back
    assert call_state(durable_store, session_id, "c_charge") == "deferred"


def test_an_interrupted_sweep_is_finished_by_the_next(durable_store: DurableStore):
    session_id = waiting_session(durable_store)
    [claim] = durable_store.claim_calls(["charge"], "w1", 0.05, 1)
    lapse(durable_store, claim)
    # A sweep that marked the claim and stopped before moving the call.
    assert durable_store.settle_lapsed(claim.token, "lapsed")
    assert [c.token for c in durable_store.lapsed_claims(10)] == [claim.token]
    assert anyio.run(sweep_claims, durable_store) == 1
    assert call_state(durable_store, session_id, "c_charge") == "unknown_outcome"
    assert durable_store.lapsed_claims(10) == []


def test_a_renewed_claim_is_not_settled(durable_store: DurableStore):
    waiting_session(durable_store)
    [claim] = durable_store.claim_calls(["charge"], "w1", 0.05, 1)
    lapse(durable_store, claim)
    durable_store.renew_claim(claim.token, 30)  # the heartbeat won the race
    assert not durable_store.settle_lapsed(claim.token, "lapsed")
    assert durable_store.claim(claim.token).state == "held"  # type: ignore[union-attr]


def test_finishing_marks_done_in_any_state(durable_store: DurableStore):
    waiting_session(durable_store)
    [claim] = durable_store.claim_calls(["lookup"], "w1", 30, 1)
    assert durable_store.finish_claim(claim.token).state == "done"
    assert durable_store.finish_claim(claim.token).state == "done"  # a retried complete
    with pytest.raises(ClaimLost) as caught:
        durable_store.renew_claim(claim.token)
    assert caught.value.state == "done"
    # A done claim's call is not handed out, even while its result is being applied.
    assert durable_store.claim_calls(["lookup"], "w2", 30, 1) == []


def test_frozen_sessions_and_expired_calls_are_not_handed_out(durable_store: DurableStore):
    frozen = waiting_session(durable_store)
    agent_for(durable_store).freeze(frozen)
    assert durable_store.claim_calls(["lookup", "charge"], "w", 30, 10) == []
    overdue = waiting_session(durable_store)
    session = durable_store.load(overdue)
    session.calls["c_lookup"].expires_ms = 1  # long past, not yet recorded as expired
    durable_store.save(session)
    claims = durable_store.claim_calls(["lookup", "charge"], "w", 30, 10)
    assert [(c.session_id, c.call_id) for c in claims] == [(overdue, "c_charge")]


def test_a_composite_store_claims_in_its_primary(tmp_path):
    primary = SQLiteStore(tmp_path / "s.db")
    store = CompositeStore(primary, FileSessionStore(tmp_path / "files"))
    assert isinstance(store, DurableStore)
    try:
        session_id = waiting_session(store)
        [claim] = store.claim_calls(["lookup"], "w", 0.05, 1)
        assert primary.claim(claim.token) == store.claim(claim.token)
        lapse(store, claim)
        assert [c.token for c in store.lapsed_claims(5)] == [claim.token]
        assert store.settle_lapsed(claim.token, "released")
        assert store.renew_claim(claim.token, 30).state == "held"
        assert store.finish_claim(claim.token).session_id == session_id
    finally:
        store.close()


#: A session with a settled call and a deferred one (`wait`, tool `echo`).
OLD_SESSION = long_session(1)


def old_rows(session: Session) -> tuple[tuple[object, ...], list[tuple[object, ...]],
                                        list[tuple[object, ...]]]:  # fmt: skip
    """The session as SQLite's schema 5 and PostgreSQL's 2 keep it: the header row, the
    turn rows, the call rows (without state and tool columns)."""
    header = (session.id, 1, session.status, session.agent_slug, session.agent_hash,
              session.schema_version, session.header_json(), 0, 0, None,
              len(session.turns))  # fmt: skip
    turns = [(session.id, i, t.model_dump_json()) for i, t in enumerate(session.turns)]
    calls = [(session.id, c.id, c.turn, not c.terminal, c.model_dump_json())
             for c in session.calls.values()]  # fmt: skip
    return header, turns, calls


def test_a_store_from_before_claims_finds_its_deferred_calls(tmp_path):
    """Migration 6 (SQLite) backfills the calls' state and tool columns it queries."""
    path = tmp_path / "v5.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
               " applied_ms INTEGER NOT NULL)")  # fmt: skip
    for n in range(1, 6):
        db.executescript(sqlite_schema.MIGRATIONS[n - 1])
        db.execute("INSERT INTO schema_migrations VALUES (?, 0)", (n,))
    header, turns, calls = old_rows(OLD_SESSION)
    db.execute(f"INSERT INTO sessions VALUES ({', '.join('?' * len(header))})", header)
    db.executemany("INSERT INTO session_turns VALUES (?, ?, ?)", turns)
    db.executemany("INSERT INTO session_calls VALUES (?, ?, ?, ?, ?)", calls)
    db.commit()
    db.close()
    with SQLiteStore(path) as store:
        [claim] = store.claim_calls(["echo"], "w", 30, 10)
        assert (claim.session_id, claim.call_id) == (OLD_SESSION.id, "wait")


def test_a_postgres_database_from_before_claims_finds_its_deferred_calls(postgres_url):
    """Migration 3 (PostgreSQL) backfills the same columns."""
    header, turns, calls = old_rows(OLD_SESSION)
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
                   " applied_ms BIGINT NOT NULL)")  # fmt: skip
        for n in (1, 2):
            db.execute(postgres_schema.MIGRATIONS[n - 1].encode())
            db.execute("INSERT INTO schema_migrations VALUES (%s, 0)", (n,))
        db.execute("INSERT INTO sessions (id, version, status, agent_slug, agent_hash,"
                   " schema_version, document, created_ms, updated_ms, due_ms, turn_count)"
                   f" VALUES ({', '.join(['%s'] * len(header))})", header)  # fmt: skip
        with db.cursor() as cursor:
            cursor.executemany("INSERT INTO session_turns VALUES (%s, %s, %s)", turns)
            cursor.executemany("INSERT INTO session_calls (session_id, call_id, turn, open,"
                               " document) VALUES (%s, %s, %s, %s, %s)", calls)  # fmt: skip
    store = PostgresStore(postgres_url)
    try:
        [claim] = store.claim_calls(["echo"], "w", 30, 10)
        assert (claim.session_id, claim.call_id) == (OLD_SESSION.id, "wait")
    finally:
        store.close()
