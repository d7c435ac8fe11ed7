"""The SQLite store on real files: WAL, migrations, compare-and-set, tokens, cache."""

from __future__ import annotations

import sqlite3

import pytest

from runner.session import Session, ToolResult, TrackedCall
from runner.session.models import new_token
from runner.stores import SessionNotFound, SQLiteStore, StoreError, VersionConflict, cache_key
from runner.stores.sqlite import SCHEMA_VERSION


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
