"""Leases with fencing tokens, the effect ledger, and migration from schema version 1."""

from __future__ import annotations

import sqlite3

import pytest

from runner.session import Session
from runner.stores import SQLiteStore
from runner.stores.base import Effect, FencedOut
from runner.stores.sqlite import MIGRATIONS, SCHEMA_VERSION


def test_a_newer_holder_fences_out_the_old_one_with_zero_rows_changed(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    session = store.create(Session.start("a", "h", "hi"), {"slug": "a"})
    first = store.acquire_lease(session.id, "one", ttl_s=30)
    assert store.acquire_lease(session.id, "two", ttl_s=30) is None  # held and alive
    store.db.execute("UPDATE leases SET expires_ms = 0")  # the first holder stalls past it
    second = store.acquire_lease(session.id, "two", ttl_s=30)
    assert second.fencing_token == first.fencing_token + 1 and second.takeovers == 1
    stale = store.load(session.id)
    stale.final_answer = "from the stale holder"
    with pytest.raises(FencedOut, match="stale"):
        store.save(stale, (first,))
    with pytest.raises(FencedOut):
        store.renew_lease(first, 30)
    assert store.load(session.id).version == session.version  # nothing changed
    assert store.save(stale, (second,)).version == session.version + 1
    store.release_lease(second)
    third = store.acquire_lease(session.id, "three", ttl_s=30)
    assert third.takeovers == 0 and third.fencing_token == second.fencing_token + 1


def test_the_ledger_keeps_the_latest_attempt(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    store.record_effect(Effect("s/c", "s", "c", 1, "external", "requested", None))
    store.record_effect(Effect("s/c", "s", "c", 1, "completed", "completed", "{}"))
    assert store.effect("s/c").state == "completed" and store.effect("x") is None


def test_migration_from_schema_version_1(tmp_path):
    path = tmp_path / "v1.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
               " applied_ms INTEGER NOT NULL)")  # fmt: skip
    db.executescript(MIGRATIONS[0])
    db.execute("INSERT INTO schema_migrations VALUES (1, 0)")
    old = Session.start("a", "h", "hi").model_dump(mode="json")
    for name in ("quarantine_reason",):
        old.pop(name)
    old["schema_version"] = 1
    import json

    db.execute("INSERT INTO sessions VALUES (?, 1, 'running', 'a', 'h', 1, ?, 0, 0)",
               (old["id"], json.dumps(old)))  # fmt: skip
    db.commit()
    db.close()
    store = SQLiteStore(path)
    assert store.schema_version() == SCHEMA_VERSION
    loaded = store.load(old["id"])
    assert loaded.schema_version == 1 and loaded.due_ms() is not None
    assert store.acquire_lease(old["id"], "me", 5).fencing_token == 1
