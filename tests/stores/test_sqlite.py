"""What only the SQLite store has: one WAL file, its numbered migrations, its indexes and
row counts. The contract every durable engine keeps is in test_contract.py."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

import pytest

from runner.session import Session, TrackedCall
from runner.state import new_token
from runner.stores import FencedOut, SQLiteStore, StoreError
from runner.stores.sqlite import MIGRATIONS, SCHEMA_VERSION
from tests.stores.sessions import long_session


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


def test_tokens_are_found_by_an_index_not_a_scan(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    session = new_session(store)
    token = new_token()
    session.calls["c"] = TrackedCall(id="c", token=token, tool="t", arguments={}, state="ready",
                                     disposition={"tag": "runSync"}, turn=1,
                                     idempotency_key="k")  # fmt: skip
    store.save(session)
    assert store.find(token).call_id == "c"
    plan = store.db.execute("EXPLAIN QUERY PLAN SELECT session_id FROM continuations"
                            " WHERE token = ?", (token,)).fetchall()  # fmt: skip
    assert "USING" in str(plan) and "SCAN" not in str(plan)


# --- sessions as rows: incremental checkpoints, partial loads, migration -------------------


def test_a_checkpoint_writes_only_what_changed(tmp_path):
    """Rows written, as SQLite counts them (the round trip itself is in test_contract.py)."""
    store = SQLiteStore(tmp_path / "s.db")
    for pairs in (2, 200):
        created = store.create(long_session(pairs), {"slug": "a"})
        session = store.load(created.id, history=False)
        session.call("wait").state = "ready"
        before = store.db.total_changes
        store.save(session)
        # The header, the last turn, and the open call: never the history, nor a call
        # that was already stored as ended.
        assert store.db.total_changes - before == 3
        assert store.load(created.id).calls["wait"].state == "ready"


def test_a_checkpoint_after_reading_the_history_still_writes_only_what_changed(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    created = store.create(long_session(200), {"slug": "a"})
    session = store.with_history(store.load(created.id, history=False))
    session.call("wait").state = "ready"
    before = store.db.total_changes
    store.save(session)
    assert store.db.total_changes - before == 3


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


def test_migration_from_schema_version_1(tmp_path):
    path = tmp_path / "v1.db"
    db = _store_at(path, 1)
    old = Session.start("a", "h", "hi").model_dump(mode="json")
    old.pop("quarantine_reason")
    old["schema_version"] = 1
    db.execute("INSERT INTO sessions VALUES (?, 1, 'running', 'a', 'h', 1, ?, 0, 0)",
               (old["id"], json.dumps(old)))  # fmt: skip
    db.commit()
    db.close()
    store = SQLiteStore(path)
    assert store.schema_version() == SCHEMA_VERSION
    loaded = store.load(old["id"])
    assert loaded.schema_version == 1 and loaded.due_ms() is not None
    assert store.acquire_lease(old["id"], "me", 5).fencing_token == 1


# --- durability setting, commits counted -------------------------------------------------


@pytest.mark.parametrize(("setting", "code"), [("NORMAL", 1), ("FULL", 2)])
def test_synchronous_is_set_on_both_connections(tmp_path, setting, code):
    store = SQLiteStore(tmp_path / "s.db", synchronous=setting)
    try:
        assert store.db.execute("PRAGMA synchronous").fetchone()[0] == code
        assert store._lease_db.db.execute("PRAGMA synchronous").fetchone()[0] == code
    finally:
        store.close()


def test_an_unknown_synchronous_setting_is_refused(tmp_path):
    with pytest.raises(ValueError, match="synchronous: expected NORMAL or FULL, got 'OFF'"):
        SQLiteStore(tmp_path / "s.db", synchronous="OFF")  # type: ignore[arg-type]


def test_commits_are_counted_on_both_connections(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    session = new_session(store)
    before = store.commits
    store.save(session)
    lease = store.acquire_lease(session.id, "me", 30)
    assert store.commits == before + 2
    with pytest.raises(FencedOut):
        store.save(store.load(session.id), (replace(lease, fencing_token=0),))
    assert store.commits == before + 2  # rolled back: not counted
    store.close()
