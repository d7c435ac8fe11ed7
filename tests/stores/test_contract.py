"""The store contract on every durable engine (the `store_engine` fixture: SQLite, PostgreSQL):
compare-and-set, typed errors, the continuation index, listing, the tool cache, partial
loads and checkpoints, copies between stores, due work, late results. One test code; what
only SQLite has (its file, WAL, its migrations) is in test_sqlite.py."""

from __future__ import annotations

import time

import pytest

from runner.session import Session, SessionTail, ToolResult, TrackedCall
from runner.state import HistoryNotLoaded, LlmTurn, PartialUserTurn, UserTurn, new_token
from runner.stores import (
    DurableStore,
    SessionNotFound,
    StoreError,
    VersionConflict,
    cache_key,
)
from tests.conftest import StoreLocations
from tests.stores.sessions import long_session


def new_session(store: DurableStore) -> Session:
    return store.create(Session.start("a", "h1", "hi"), {"slug": "a"})


def test_compare_and_set_refuses_a_stale_write(store_locations: StoreLocations):
    writer_a, writer_b = store_locations.open(), store_locations.open()
    session = new_session(writer_a)
    read_a, read_b = writer_a.load(session.id), writer_b.load(session.id)
    assert read_a.version == read_b.version == 1
    read_a.final_answer = "a"
    assert writer_a.save(read_a).version == 2
    read_b.final_answer = "b"
    with pytest.raises(VersionConflict) as caught:
        writer_b.save(read_b)
    assert (caught.value.expected, caught.value.actual) == (1, 2)
    assert writer_b.load(session.id).final_answer == "a"


def test_load_of_a_missing_session_is_typed(durable_store: DurableStore):
    with pytest.raises(SessionNotFound, match="no session 'x'"):
        durable_store.load("x")
    with pytest.raises(SessionNotFound):
        durable_store.save(Session.start("a", "h", "p").model_copy(update={"version": 1}))


def test_a_session_is_created_once(durable_store: DurableStore):
    session = new_session(durable_store)
    with pytest.raises(StoreError, match="already exists"):
        durable_store.create(Session.start("a", "h1", "hi").model_copy(update={"id": session.id}),
                             {"slug": "a"})  # fmt: skip
    assert durable_store.load(session.id).version == 1


def test_tokens_are_indexed_with_the_session(durable_store: DurableStore):
    session = new_session(durable_store)
    token = new_token()
    session.calls["c"] = TrackedCall(id="c", token=token, tool="t", arguments={}, state="ready",
                                     disposition={"tag": "runSync"}, turn=1,
                                     idempotency_key="k")  # fmt: skip
    durable_store.save(session)
    found = durable_store.find(token)
    assert found is not None and (found.session_id, found.call_id) == (session.id, "c")
    assert durable_store.find(new_token()) is None


def test_agent_documents_and_listing(durable_store: DurableStore):
    session = new_session(durable_store)
    assert durable_store.agent_document("h1") == {"slug": "a"}
    durable_store.put_agent("h2", {"slug": "b", "n": [1, 2]})
    assert durable_store.agent_document("h2") == {"slug": "b", "n": [1, 2]}
    with pytest.raises(StoreError, match="no agent definition"):
        durable_store.agent_document("h3")
    assert [s.id for s in durable_store.list("running")] == [session.id]
    assert [s.id for s in durable_store.list()] == [session.id]
    assert durable_store.list("completed") == []
    (summary,) = durable_store.list()
    assert (summary.status, summary.agent_slug, summary.version) == ("running", "a", 1)


def test_the_cache_keys_on_tool_and_canonical_arguments(durable_store: DurableStore):
    store = durable_store
    assert cache_key("t", {"a": 1, "b": 2}) == cache_key("t", {"b": 2, "a": 1})
    assert cache_key("t", {"a": 1}) != cache_key("u", {"a": 1})
    store.put("t", {"a": 1, "b": [1]}, ToolResult.ok("v"), None)
    hit = store.get("t", {"b": [1], "a": 1})
    assert hit is not None and hit.content == "v"
    assert store.get("t", {"a": 1}) is None
    store.put("t", {"a": 1, "b": [1]}, ToolResult.ok("w"), 3600)  # a newer result replaces it
    hit = store.get("t", {"a": 1, "b": [1]})
    assert hit is not None and hit.content == "w"
    store.put("t", {"x": 1}, ToolResult.ok("old"), ttl_s=0.001)
    time.sleep(0.05)  # well past its millisecond
    assert store.get("t", {"x": 1}) is None


def test_a_partial_load_and_a_checkpoint_keep_the_whole_session(durable_store: DurableStore):
    store = durable_store
    for pairs in (2, 200):
        created = store.create(long_session(pairs), {"slug": "a"})
        session = store.load(created.id, history=False)
        assert session.first_turn == session.turn_count - 1 and len(session.turns) == 1
        session.call("wait").state = "ready"
        store.save(session)
        assert store.load(created.id).calls["wait"].state == "ready"
        # The whole session, loaded again, is what was created with that one change.
        expected = created.model_copy(deep=True)
        expected.calls["wait"].state = "ready"
        again = store.load(created.id)
        assert again == expected.model_copy(update={"version": 2, "updated_ms": again.updated_ms})


def test_with_history_after_a_partial_load_is_the_session_as_created(
    durable_store: DurableStore,
):
    store = durable_store
    created = store.create(long_session(200), {"slug": "a"})
    session = store.with_history(store.load(created.id, history=False))
    assert session.has_history and session == created
    session.call("wait").state = "ready"
    assert store.save(session).version == 2
    assert store.load(created.id).calls["wait"].state == "ready"


def test_a_tail_is_its_own_type_and_a_whole_session_is_a_session(durable_store: DurableStore):
    store = durable_store
    created = store.create(long_session(3), {"slug": "a"})
    tail = store.load(created.id, history=False)
    assert type(tail) is SessionTail and tail.first_turn == 8
    assert type(store.load(created.id)) is Session
    whole = store.with_history(tail)
    assert type(whole) is Session and whole == created
    assert store.with_history(whole) is whole  # nothing left to read
    saved = store.save(tail)  # a save returns what it was given, a version on
    assert type(saved) is SessionTail and saved.version == 2
    # A tail that begins at the first turn holds everything: it is handed out whole.
    short = new_session(store)
    assert type(store.load(short.id, history=False)) is Session
    assert store.load(short.id, history=False) == short


def test_a_load_reads_the_history_only_when_used_and_as_it_was(
    store_locations: StoreLocations,
):
    store, other = store_locations.open(), store_locations.open()
    created = store.create(long_session(3), {"slug": "a"})
    session = store.load(created.id, history=False)
    assert [c.id for c in session.open_calls()] == ["wait"] and session.due_ms() is None
    assert isinstance(session.last_turn, PartialUserTurn) and session.turn_count == 9
    assert not session.has_history
    with pytest.raises(HistoryNotLoaded, match="only the turns from 8 on"):
        session.require_history("the LLM's next request")
    # Someone else advances the session before this reader looks at its history...
    ahead = other.load(created.id)
    finish_wait = ahead.call("wait")
    finish_wait.state, finish_wait.result = "completed", ToolResult.ok("w")
    ahead.turns[-1] = UserTurn(tool_results=[])
    ahead.turns.append(LlmTurn(text="the end"))
    other.save(ahead)
    # ...the reader still sees the session as it loaded it, and cannot commit over it.
    whole = store.with_history(session)
    assert whole.turns == created.turns
    assert whole.calls == created.calls and list(whole.calls) == list(created.calls)
    with pytest.raises(VersionConflict):
        store.save(whole)
    assert other.load(created.id).turns == ahead.turns


def test_a_session_from_another_store_is_written_whole(store_locations: StoreLocations):
    first = store_locations.open()
    second = store_locations.open(store_locations.fresh())
    created = first.create(long_session(2), {"slug": "a"})
    copied = second.create(first.load(created.id), {"slug": "a"})
    assert second.load(created.id) == copied == created
    with pytest.raises(HistoryNotLoaded):  # a store gets a session whole, never a part
        second.create(first.load(created.id, history=False), {"slug": "a"})
    found = second.find(created.call("wait").token)
    assert found is not None and found.call_id == "wait"


def test_due_sessions_are_running_or_waiting_due_and_not_leased(durable_store: DurableStore):
    store = durable_store
    due = new_session(store)  # running, nothing open: due now
    held = new_session(store)
    done = new_session(store)
    done.status, done.final_answer = "completed", "x"
    store.save(done)
    waiting = store.create(long_session(1), {"slug": "a"})  # its only open call is deferred
    assert waiting.due_ms() is None
    lease = store.acquire_lease(held.id, "me", 30)
    assert lease is not None
    assert set(store.due_sessions(10)) == {due.id}
    assert store.due_sessions(10, exclude=[due.id]) == []
    store.release_lease(lease)
    assert set(store.due_sessions(10)) == {due.id, held.id}
    assert len(store.due_sessions(1)) == 1


def test_every_late_result_is_kept(durable_store: DurableStore):
    store = durable_store
    session = new_session(store)
    assert store.late_results(session.id) == []
    store.record_late("t1", session.id, "a", ToolResult.ok("first"))
    store.record_late("t1", session.id, "a", ToolResult.ok("again"))
    store.record_late("t2", session.id, "b", ToolResult.ok({"n": 1}))
    kept = sorted((c, str(r.content)) for c, r in store.late_results(session.id))
    assert kept == [("a", "again"), ("a", "first"), ("b", "{'n': 1}")]
    assert store.late_results("other") == []
