"""The SQLite store on real files: WAL, migrations, compare-and-set, tokens, cache."""

from __future__ import annotations

import json
import sqlite3

import pytest

from runner.session import Session, ToolResult, TrackedCall
from runner.state import (
    HistoryNotLoaded,
    LlmTurn,
    PartialUserTurn,
    ToolCall,
    ToolResultEntry,
    UserTurn,
    new_token,
)
from runner.stores import SessionNotFound, SQLiteStore, StoreError, VersionConflict, cache_key
from runner.stores.sqlite import MIGRATIONS, SCHEMA_VERSION


def new_session(store: SQLiteStore) -> Session:
    return store.create(Session.start("a", "h1", "hi"), {"slug": "a"})


def test_one_wal_file_with_recorded_migrations(tmp_path):
    store = SQLiteStore(tmp_path / "deep" / "state.db")
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.schema_version() == SCHEMA_VERSION
    store.close()
    again = SQLiteStore(tmp_path / "deep" / "state.db")  # reopening applies nothing twice
    rows = again.db.execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0]
    assert rows == SCHEMA_VERSION


def test_a_newer_schema_is_refused(tmp_path):
    SQLiteStore(tmp_path / "s.db").close()
    with sqlite3.connect(tmp_path / "s.db") as db:
        db.execute("INSERT INTO schema_migrations VALUES (?, 0)", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer than this program"):
        SQLiteStore(tmp_path / "s.db")


def test_compare_and_set_refuses_a_stale_write(tmp_path):
    path = tmp_path / "s.db"
    writer_a, writer_b = SQLiteStore(path), SQLiteStore(path)
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


def test_load_of_a_missing_session_is_typed(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    with pytest.raises(SessionNotFound, match="no session 'x'"):
        store.load("x")
    with pytest.raises(SessionNotFound):
        store.save(Session.start("a", "h", "p").model_copy(update={"version": 1}))


def test_tokens_are_indexed_with_the_session(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    session = new_session(store)
    token = new_token()
    session.calls["c"] = TrackedCall(id="c", token=token, tool="t", arguments={}, state="ready",
                                     disposition={"tag": "runSync"}, turn=1,
                                     idempotency_key="k")  # fmt: skip
    store.save(session)
    found = store.find(token)
    assert (found.session_id, found.call_id) == (session.id, "c")
    assert store.find(new_token()) is None
    plan = store.db.execute("EXPLAIN QUERY PLAN SELECT session_id FROM continuations"
                            " WHERE token = ?", (token,)).fetchall()  # fmt: skip
    assert "USING" in str(plan) and "SCAN" not in str(plan)


def test_agent_documents_and_listing(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    session = new_session(store)
    assert store.agent_document("h1") == {"slug": "a"}
    assert [s.id for s in store.list("running")] == [session.id]
    assert store.list("completed") == []


def test_the_cache_keys_on_tool_and_canonical_arguments(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    assert cache_key("t", {"a": 1, "b": 2}) == cache_key("t", {"b": 2, "a": 1})
    assert cache_key("t", {"a": 1}) != cache_key("u", {"a": 1})
    store.put("t", {"a": 1, "b": [1]}, ToolResult.ok("v"), None)
    assert store.get("t", {"b": [1], "a": 1}).content == "v"
    assert store.get("t", {"a": 1}) is None
    store.put("t", {"x": 1}, ToolResult.ok("old"), ttl_s=0.001)
    store.db.execute("UPDATE tool_cache SET expires_ms = 1")
    assert store.get("t", {"x": 1}) is None


# --- sessions as rows: incremental checkpoints, partial loads, migration -------------------


def long_session(pairs: int) -> Session:
    """A prompt, `pairs` settled (LLM call + results) pairs, then a partial user turn whose
    first call has finished and whose second is deferred."""
    session = Session.start("a", "h1", "hi")

    def call(call_id: str, turn: int, state: str, result: ToolResult | None) -> TrackedCall:
        return TrackedCall(id=call_id, token=new_token(), tool="echo", arguments={"n": turn},
                           state=state, disposition={"tag": "runSync"}, turn=turn,
                           idempotency_key=f"{session.id}/{call_id}", result=result)  # fmt: skip

    for n in range(pairs):
        turn = len(session.turns)
        session.turns.append(LlmTurn(tool_calls=[ToolCall(id=f"e{n}", name="echo",
                                                          arguments={"n": turn})]))  # fmt: skip
        session.calls[f"e{n}"] = call(f"e{n}", turn, "completed", ToolResult.ok(n))
        entry = ToolResultEntry(tool_call_id=f"e{n}", tool="echo", result=ToolResult.ok(n))
        session.turns.append(UserTurn(tool_results=[entry]))
    turn = len(session.turns)
    requested = [ToolCall(id=i, name="echo", arguments={}) for i in ("done", "wait")]
    session.turns.append(LlmTurn(tool_calls=requested))
    session.calls["done"] = call("done", turn, "completed", ToolResult.ok("d"))
    session.calls["wait"] = call("wait", turn, "deferred", None)
    session.turns.append(PartialUserTurn(call_ids=["done", "wait"]))
    return session


def test_a_checkpoint_writes_only_what_changed(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    for pairs in (2, 200):
        created = store.create(long_session(pairs), {"slug": "a"})
        session = store.load(created.id, history=False)
        assert session.first_turn == session.turn_count - 1 and len(session.turns) == 1
        session.call("wait").state = "ready"
        before = store.db.total_changes
        store.save(session)
        # The header, the last turn, and the open call: never the history, nor a call
        # that was already stored as ended.
        assert store.db.total_changes - before == 3
        assert store.load(created.id).calls["wait"].state == "ready"
        # The whole session, loaded again, is what was created with that one change.
        expected = created.model_copy(deep=True)
        expected.calls["wait"].state = "ready"
        again = store.load(created.id)
        assert again == expected.model_copy(update={"version": 2, "updated_ms": again.updated_ms})


def test_a_checkpoint_after_reading_the_history_still_writes_only_what_changed(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    created = store.create(long_session(200), {"slug": "a"})
    session = store.with_history(store.load(created.id, history=False))
    assert session.has_history and session == created
    session.call("wait").state = "ready"
    before = store.db.total_changes
    store.save(session)
    assert store.db.total_changes - before == 3


def test_a_load_reads_the_history_only_when_used_and_as_it_was(tmp_path):
    path = tmp_path / "s.db"
    store, other = SQLiteStore(path), SQLiteStore(path)
    created = store.create(long_session(3), {"slug": "a"})
    session = store.load(created.id, history=False)
    assert [c.id for c in session.open_calls()] == ["wait"] and session.due_ms() is None
    assert isinstance(session.last_turn, PartialUserTurn) and session.turn_count == 9
    assert not session.has_history
    with pytest.raises(HistoryNotLoaded, match="only the turns from 8 on"):
        session.require_history("the LLM's next request")
    # Someone else advances the session before this reader looks at its history...
    ahead = other.load(created.id)
    _finish_wait = ahead.call("wait")
    _finish_wait.state, _finish_wait.result = "completed", ToolResult.ok("w")
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


def test_a_session_from_another_store_is_written_whole(tmp_path):
    first, second = SQLiteStore(tmp_path / "a.db"), SQLiteStore(tmp_path / "b.db")
    created = first.create(long_session(2), {"slug": "a"})
    copied = second.create(first.load(created.id), {"slug": "a"})
    assert second.load(created.id) == copied == created
    with pytest.raises(HistoryNotLoaded):  # a store gets a session whole, never a part
        second.create(first.load(created.id, history=False), {"slug": "a"})
    assert second.find(created.call("wait").token).call_id == "wait"


def _store_at(path, version: int) -> sqlite3.Connection:
    """A store file as a release with schema `version` left it."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
               " applied_ms INTEGER NOT NULL)")  # fmt: skip
    for n in range(1, version + 1):
        db.executescript(MIGRATIONS[n - 1])
        db.execute("INSERT INTO schema_migrations VALUES (?, 0)", (n,))
    return db


#: The last store schema that kept a session as one document (3 moved them into rows).
BEFORE_ROWS = 2


@pytest.mark.parametrize("version", range(1, BEFORE_ROWS + 1))
def test_migration_moves_sessions_into_rows(tmp_path, version):
    path = tmp_path / "old.db"
    db = _store_at(path, version)
    sessions = [long_session(0), long_session(5), Session.start("a", "h1", "only a prompt")]
    sessions[0].status, sessions[0].final_answer = "completed", "done"
    for s in sessions:
        values = (s.id, 3, s.status, "a", "h1", s.schema_version, s.to_json(), 0, 0)
        db.execute(f"INSERT INTO sessions VALUES ({', '.join('?' * len(values))}"
                   f"{', NULL' if version >= 2 else ''})", values)  # fmt: skip
        db.execute("INSERT INTO continuations SELECT value ->> 'token', ?, key"
                   " FROM json_each(?, '$.calls')", (s.id, s.to_json()))  # fmt: skip
    db.commit()
    db.close()
    store = SQLiteStore(path)
    assert store.schema_version() == SCHEMA_VERSION
    assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for s in sessions:
        loaded = store.load(s.id, history=False)
        assert loaded.version == 3 and loaded.turn_count == len(s.turns)
        assert [c.id for c in loaded.open_calls()] == [c.id for c in s.open_calls()]
        assert store.with_history(loaded) == s.model_copy(update={"version": 3})
        assert store.load(s.id) == s.model_copy(update={"version": 3})
        loaded.status = "frozen"
        assert store.save(loaded).version == 4
        assert store.load(s.id).turns == s.turns


def test_migration_renames_a_paused_session_frozen(tmp_path):
    """Store schema 4: `paused` (an operator's stop) is now `frozen`, in the status
    column that `list` filters on and in the stored document alike."""
    path = tmp_path / "old.db"
    db = _store_at(path, 3)
    session = Session.start("a", "h1", "only a prompt")
    header = json.loads(session.header_json()) | {"status": "paused"}
    db.execute("INSERT INTO sessions VALUES (?, 1, 'paused', 'a', 'h1', 2, ?, 0, 0, NULL, 1)",
               (session.id, json.dumps(header)))  # fmt: skip
    db.execute("INSERT INTO session_turns VALUES (?, 0, ?)",
               (session.id, session.turns[0].model_dump_json()))  # fmt: skip
    db.commit()
    db.close()
    store = SQLiteStore(path)
    assert store.load(session.id).status == "frozen"
    assert [s.id for s in store.list("frozen")] == [session.id] and store.list("paused") == []
    assert store.db.execute("SELECT document ->> '$.status' FROM sessions").fetchone() == (
        "frozen",
    )


def test_a_document_that_says_paused_reads_as_frozen():
    """A file store (or any document) written before the rename loads as it is."""
    session = Session.start("a", "h1", "go")
    document = json.loads(session.to_json()) | {"status": "paused", "schema_version": 2}
    assert Session.model_validate(document).status == "frozen"
