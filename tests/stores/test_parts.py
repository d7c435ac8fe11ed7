"""A store is made of parts: each backend composes them, a durable composite swaps in
only its sessions part, and the SQL both engines share is one text that a dialect
renders for each."""

from __future__ import annotations

import sqlite3
import time

import pytest

from runner.session import Session
from runner.stores import (
    CompositeSessions,
    CompositeStore,
    DurableStore,
    FileSessionStore,
    SQLiteStore,
    StoreError,
    StoreParts,
)
from runner.stores.sql.dialect import POSTGRES, SQLITE


def test_a_durable_composite_has_its_primarys_parts_but_its_own_sessions(tmp_path):
    primary = SQLiteStore(tmp_path / "s.db")
    composite = CompositeStore(primary, FileSessionStore(tmp_path / "files"))
    assert isinstance(composite, DurableStore)
    assert isinstance(composite.parts.sessions, CompositeSessions)
    for part in ("leases", "events", "ledger", "call_claims", "cache"):
        assert getattr(composite.parts, part) is getattr(primary.parts, part), part
    lease = composite.acquire_lease("s", "me", 30)
    assert primary.lease("s") == lease  # a lease taken through the composite is the primary's


def test_a_composite_of_a_composite_shares_the_innermost_parts(tmp_path):
    primary = SQLiteStore(tmp_path / "s.db")
    inner = CompositeStore(primary, FileSessionStore(tmp_path / "a"))
    outer = CompositeStore(inner, FileSessionStore(tmp_path / "b"))
    assert StoreParts.of(outer).ledger is primary.parts.ledger
    assert outer.parts.sessions is not inner.parts.sessions


def test_a_plain_composite_refuses_fences_it_cannot_check(tmp_path):
    files = FileSessionStore(tmp_path / "files")
    composite = CompositeStore(files, SQLiteStore(tmp_path / "s.db"))
    assert not isinstance(composite, DurableStore)
    session = composite.create(Session.start("a", "h", "hi"), {"slug": "a"})
    fence = SQLiteStore(tmp_path / "other.db").acquire_lease(session.id, "me", 30)
    assert fence is not None
    with pytest.raises(StoreError, match="cannot check fences"):
        composite.sessions.save(session, (fence,))
    assert composite.save(session).version == 2


def test_one_text_renders_for_either_engine():
    template = "SELECT a FROM t WHERE b = ? AND c LIKE 'x%' AND d <= {now} ORDER BY {order}{lock}"
    assert POSTGRES.sql(template) == (
        "SELECT a FROM t WHERE b = %s AND c LIKE 'x%%' AND d <="
        f" {POSTGRES.now_ms} ORDER BY seq FOR UPDATE"
    )
    assert SQLITE.sql(template) == (
        f"SELECT a FROM t WHERE b = ? AND c LIKE 'x%' AND d <= {SQLITE.now_ms} ORDER BY rowid"
    )


def test_sqlites_clock_is_whole_milliseconds_of_unix_time():
    db = sqlite3.connect(":memory:")
    now = db.execute(f"SELECT {SQLITE.now_ms}, typeof({SQLITE.now_ms})").fetchone()
    assert now[1] == "integer" and abs(now[0] - time.time() * 1000) < 5000
