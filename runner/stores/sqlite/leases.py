"""SQLiteStore's leases and due-session offers: what SQLite does its own way
(runner.stores.sql.leases has the rest). With one writer, taking a lease reads and
writes it in one transaction (the caller's); `due_sessions` offers every due session not leased by a
live holder (there is no one else polling the same file to keep apart from)."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection

from runner.stores.base import Lease
from runner.stores.sql.dialect import ACTIVE_STATUSES
from runner.stores.sql.engine import rows
from runner.stores.sql.leases import SqlLeases
from runner.stores.sqlite.engine import SQLiteEngine


class SQLiteLeases(SqlLeases[sqlite3.Connection]):
    def __init__(self, engine: SQLiteEngine) -> None:
        super().__init__(engine)
        self._due = engine.dialect.sql(
            "SELECT s.id FROM sessions s LEFT JOIN leases l ON l.name = s.id"
            f" WHERE s.due_ms <= {{now}} AND s.status IN {ACTIVE_STATUSES}"
            " AND (l.owner IS NULL OR l.expires_ms <= {now})"
            " ORDER BY s.due_ms LIMIT ?"
        )

    def acquire_in(
        self, tx: sqlite3.Connection, name: str, owner: str, ttl_ms: int
    ) -> Lease | None:
        now = tx.execute(self._now).fetchone()[0]
        row = tx.execute(
            "SELECT owner, expires_ms, fencing_token, takeovers FROM leases WHERE name = ?",
            (name,),
        ).fetchone()
        held_by, expires, token, takeovers = row or (None, 0, 0, 0)
        if held_by is not None and expires > now:
            return None
        # A lease left behind (never released) means its holder died: count it.
        takeovers = takeovers + 1 if held_by is not None else 0
        lease = Lease(name, owner, token + 1, now + ttl_ms, takeovers)
        tx.execute(
            "INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?)",
            (name, owner, lease.expires_ms, lease.fencing_token, takeovers),
        )
        return lease

    def release_in(self, tx: sqlite3.Connection, lease: Lease) -> None:
        tx.execute(
            "UPDATE leases SET owner = NULL, expires_ms = 0, takeovers = 0"
            " WHERE name = ? AND fencing_token = ?",
            (lease.name, lease.fencing_token),
        )

    def due_sessions(self, limit: int, exclude: Collection[str] = ()) -> list[str]:
        """Sessions a worker can advance now: due, and not leased by a live holder."""
        found = self._engine.read(
            "finding due sessions", lambda db: rows(db, self._due, (limit + len(exclude),))
        )
        return [r[0] for r in found if r[0] not in exclude][:limit]
