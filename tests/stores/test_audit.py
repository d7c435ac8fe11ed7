"""The audit trail in the stores, on both engines: records appended and listed with
filters, a table the database itself keeps append-only, its indexes, the migration
from the schema before it, and where a file store and a composite keep theirs."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from runner.isolation.audit import AuditQuery, AuditRecord, ms_to_iso
from runner.stores import (
    CompositeStore,
    FileSessionStore,
    PostgresStore,
    SQLiteStore,
    audit_log_of,
    audit_sink_of,
)
from runner.stores import sqlite as sqlite_schema
from runner.stores.postgres import schema as postgres_schema

START = 1_780_000_000_000


def record(n: int, **fields) -> AuditRecord:
    values = {"at": ms_to_iso(START + n * 1000), "request_id": f"r{n}", "tool": "bash",
              "runner": "docker", "outcome": "ok", "duration_ms": 12.5, "bytes_in": 100 + n,
              "bytes_out": 7, "arguments_sha256": "a" * 64, "output_sha256": "b" * 64,
              "limits": {"memory_bytes": 536870912, "runtime": "runc"},
              "network": {"mode": "none"}, **fields}  # fmt: skip
    return AuditRecord(**values)


def fill(log) -> None:
    for r in (record(1, session_id="s1", call_id="a"),
              record(2, session_id="s1", call_id="b", tool="python", outcome="WORKER_TIMEOUT"),
              record(3, session_id="s2", call_id="a", outcome="WORKER_OOM"),
              record(4, session_id="s1", call_id="c")):  # fmt: skip
        log.append_audit(r)


def ids(log, **query) -> list[str]:
    return [r.request_id for r in log.audit_records(AuditQuery(**query))]


def test_records_are_listed_by_session_tool_outcome_and_time(durable_store):
    log = audit_log_of(durable_store)
    assert log is durable_store and ids(log) == []
    fill(log)
    assert ids(log) == ["r1", "r2", "r3", "r4"]
    assert ids(log, limit=2) == ["r3", "r4"]  # the newest two, oldest first
    assert ids(log, session_id="s1") == ["r1", "r2", "r4"]
    assert ids(log, tool="python") == ["r2"]
    assert ids(log, outcome="WORKER_OOM") == ["r3"]
    assert ids(log, since_ms=START + 2000, until_ms=START + 4000) == ["r2", "r3"]
    assert ids(log, session_id="s1", outcome="ok", limit=None) == ["r1", "r4"]
    [stored] = log.audit_records(AuditQuery(tool="python"))
    assert stored == record(2, session_id="s1", call_id="b", tool="python",
                            outcome="WORKER_TIMEOUT")  # fmt: skip


def test_the_sink_of_a_store_writes_to_its_table(durable_store):
    sink = audit_sink_of(durable_store)
    sink.append(record(9, session_id="s9"))
    assert ids(durable_store, session_id="s9") == ["r9"]
    assert sink.description == durable_store.description


def _raw(store, statement: str) -> None:
    if isinstance(store, SQLiteStore):
        store.db.execute(statement)
    else:
        assert isinstance(store, PostgresStore)
        with store.connection() as db:
            db.execute(statement)


@pytest.mark.parametrize("statement", [
    "UPDATE audit_records SET outcome = 'ok'",
    "DELETE FROM audit_records",
    "TRUNCATE audit_records",
])  # fmt: skip
def test_the_database_refuses_to_change_or_remove_a_record(durable_store, store_engine, statement):
    if store_engine == "sqlite" and statement.startswith("TRUNCATE"):
        statement = "DELETE FROM audit_records WHERE 1"  # SQLite's truncate is a DELETE
    fill(durable_store)
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.RaiseException),
                       match="append-only"):  # fmt: skip
        _raw(durable_store, statement)
    assert ids(durable_store) == ["r1", "r2", "r3", "r4"]


def test_the_table_is_indexed_by_time_session_tool_and_outcome(durable_store):
    wanted = {f"audit_records_by_{name}" for name in ("time", "session", "tool", "outcome")}
    if isinstance(durable_store, SQLiteStore):
        rows = durable_store.db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'audit_records'"
        ).fetchall()
        plan = durable_store.db.execute(
            "EXPLAIN QUERY PLAN SELECT record FROM audit_records WHERE session_id = 's1'"
            " ORDER BY at_ms DESC"
        ).fetchall()
        assert "audit_records_by_session" in str(plan)
    else:
        with durable_store.connection() as db:
            rows = db.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'audit_records'"
            ).fetchall()
    assert wanted <= {row[0] for row in rows}


def test_an_sqlite_store_from_before_the_audit_trail_gains_it(tmp_path):
    path = tmp_path / "v6.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
               " applied_ms INTEGER NOT NULL)")  # fmt: skip
    for n in range(1, 7):
        db.executescript(sqlite_schema.MIGRATIONS[n - 1])
        db.execute("INSERT INTO schema_migrations VALUES (?, 0)", (n,))
    db.commit()
    db.close()
    with SQLiteStore(path) as store:
        assert store.schema_version() == 7 == sqlite_schema.SCHEMA_VERSION
        store.append_audit(record(1))
        assert ids(store) == ["r1"]


def test_a_postgres_database_from_before_the_audit_trail_gains_it(postgres_url):
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
                   " applied_ms BIGINT NOT NULL)")  # fmt: skip
        for n in (1, 2, 3):
            db.execute(postgres_schema.MIGRATIONS[n - 1].encode())
            db.execute("INSERT INTO schema_migrations VALUES (%s, 0)", (n,))
    with PostgresStore(postgres_url) as store:
        assert store.schema_version() == 4 == postgres_schema.SCHEMA_VERSION
        store.append_audit(record(1))
        assert ids(store) == ["r1"]


def test_a_file_store_keeps_its_records_in_a_json_lines_file_beside_its_sessions(tmp_path):
    files = FileSessionStore(tmp_path / "files")
    log = audit_log_of(files)
    assert ids(log) == []
    fill(log)
    assert ids(log, session_id="s2") == ["r3"]
    lines = (tmp_path / "files" / "audit.jsonl").read_bytes().splitlines()
    assert [AuditRecord.from_json(line).request_id for line in lines] == ["r1", "r2", "r3", "r4"]


def test_a_composite_keeps_its_records_in_its_primary(tmp_path):
    primary = SQLiteStore(tmp_path / "s.db")
    files = FileSessionStore(tmp_path / "files")
    with CompositeStore(primary, files) as composite:
        assert audit_log_of(composite) is primary
        audit_sink_of(composite).append(record(1))
        assert ids(primary) == ["r1"]
        assert not (tmp_path / "files" / "audit.jsonl").exists()
