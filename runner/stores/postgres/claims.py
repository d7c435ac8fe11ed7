"""Leases, due work and its announcements: how workers on many hosts share sessions.

Leases are measured in database time; taking one is a single upsert that succeeds only
once the last holder released it or let it expire (a takeover, counted), and fencing
tokens only grow. Lease calls use the lease pool (short lock timeout, a budget of their
own), so a renewal never waits behind data calls. `due_sessions` claims rows with
`FOR UPDATE SKIP LOCKED`; `wait_for_due` listens for the NOTIFY the store sends when a
session becomes due and claimable.
"""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from runner.stores.base import FencedOut, Lease
from runner.stores.postgres.connections import Connection, Database, one, rows
from runner.stores.postgres.events import Listener

logger = logging.getLogger(__name__)

#: Database time in epoch milliseconds (floored, as Python's int(time.time() * 1000)).
DB_NOW = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
#: NOTIFY channel: a session may have become due (payload: its id).
DUE_CHANNEL = "agents_runner_due"
#: Statuses a worker advances (as SQLiteStore.due_sessions).
ACTIVE = "('running', 'waiting')"


class Claims:
    """PostgresStore's leases and due work (a mixin: PostgresStore sets these up)."""

    _db: Database
    _instance: str
    _offer_ms: int
    _due_listener: Listener
    #: Database time minus this host's clock, last measured (see `_stamp`).
    _offset_ms: int = 0
    description: str

    def now_ms(self) -> int:
        """Database time: what leases are measured against."""
        row = self._db.statement(
            "reading the clock", lambda db: one(db, f"SELECT {DB_NOW}"), lease=True
        )
        assert row is not None
        self._align(int(row[0]))
        return int(row[0])

    def _align(self, database_ms: int) -> None:
        """Remember how far this host's clock is from the database's (`_stamp`)."""
        self._offset_ms = database_ms - int(time.time() * 1000)

    def _stamp(self) -> int:
        """Database time without a round trip: this host's clock plus the offset last
        measured. What the store writes as a time (a session's updated_ms, a cache
        entry's expiry) is on the one clock every host compares against, so a host
        whose clock is an hour off neither hides a session nor keeps a stale entry."""
        return int(time.time() * 1000) + self._offset_ms

    def due_sessions(self, limit: int, exclude: Collection[str] = ()) -> builtins.list[str]:
        """Sessions a worker can advance now: due, and not leased by a live holder.

        Concurrent callers get disjoint sessions: rows are claimed with `FOR UPDATE SKIP
        LOCKED` and marked as offered to this store instance for `offer_s`, during which
        other instances pass them over (the one offered takes their leases meanwhile).
        This instance sees its own offers again, so to one caller it behaves exactly as
        SQLiteStore.due_sessions does."""
        if limit <= 0:
            return []

        def work(db: Connection) -> list[tuple[Any, ...]]:
            return rows(
                db,
                f"""
                WITH clock AS (SELECT {DB_NOW} AS ms),
                picked AS (
                    SELECT s.id, s.due_ms, s.seq FROM sessions s CROSS JOIN clock
                    LEFT JOIN leases l ON l.name = s.id
                    WHERE s.due_ms <= clock.ms AND s.status IN {ACTIVE}
                      AND (l.owner IS NULL OR l.expires_ms <= clock.ms)
                      AND (s.offered_until_ms IS NULL OR s.offered_until_ms <= clock.ms
                           OR s.offered_to = %(me)s)
                      AND NOT (s.id = ANY(%(exclude)s))
                    ORDER BY s.due_ms, s.seq LIMIT %(limit)s
                    FOR UPDATE OF s SKIP LOCKED)
                UPDATE sessions s SET offered_to = %(me)s,
                    offered_until_ms = (SELECT ms FROM clock) + %(offer)s
                FROM picked WHERE s.id = picked.id
                RETURNING s.id, picked.due_ms, picked.seq""",
                {
                    "me": self._instance,
                    "exclude": builtins.list(exclude),
                    "limit": limit,
                    "offer": self._offer_ms,
                },
            )

        # One statement, idempotent for this instance: a retry offers the same sessions.
        offered = self._db.statement("finding due sessions", work)
        return [row[0] for row in sorted(offered, key=lambda r: (r[1], r[2]))]

    def wait_for_due(self, timeout_s: float) -> bool:
        """Block until a NOTIFY says a session may be due (True) or `timeout_s` passes
        (False), on a LISTEN connection of its own (see Listener)."""
        return self._due_listener.wait(timeout_s)

    # --- leases ------------------------------------------------------------------------

    def acquire_lease(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        """One upsert: a new lease, or the next token when the last holder released it or
        let it expire (a takeover, counted), or nothing while a live holder has it."""
        ttl = int(ttl_s * 1000)

        def work(db: Connection) -> tuple[Any, ...] | None:
            return one(
                db,
                f"""
                INSERT INTO leases AS l (name, owner, expires_ms, fencing_token, takeovers)
                VALUES (%(name)s, %(owner)s, {DB_NOW} + %(ttl)s, 1, 0)
                ON CONFLICT (name) DO UPDATE SET owner = excluded.owner,
                    expires_ms = excluded.expires_ms, fencing_token = l.fencing_token + 1,
                    takeovers = CASE WHEN l.owner IS NULL THEN 0 ELSE l.takeovers + 1 END
                WHERE l.owner IS NULL OR l.expires_ms <= excluded.expires_ms - %(ttl)s
                RETURNING fencing_token, expires_ms, takeovers""",
                {"name": name, "owner": owner, "ttl": ttl},
            )

        row = self._db.write(f"acquiring lease {name}", work, lease=True)
        if row is None:
            return None
        self._align(int(row[1]) - ttl)  # the lease starts at the database's now
        return Lease(name, owner, row[0], row[1], row[2])

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        def work(db: Connection) -> int | None:
            row = one(
                db,
                f"UPDATE leases SET expires_ms = {DB_NOW} + %s WHERE name = %s"
                " AND fencing_token = %s RETURNING expires_ms",
                (int(ttl_s * 1000), lease.name, lease.fencing_token),
            )
            return int(row[0]) if row else None

        expires = self._db.statement(f"renewing lease {lease.name}", work, lease=True, writes=True)
        if expires is None:
            raise FencedOut(lease.name, lease.fencing_token, self._token(lease.name))
        return replace(lease, expires_ms=expires)

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up cleanly (a clean release resets the takeover count), and
        wake idle workers if the session is due: no one else could take it until now."""
        self._db.statement(
            f"releasing lease {lease.name}",
            lambda db: db.execute(
                f"""WITH released AS (
                UPDATE leases SET owner = NULL, expires_ms = 0, takeovers = 0
                WHERE name = %(name)s AND fencing_token = %(token)s RETURNING name)
            SELECT pg_notify(%(channel)s, s.id) FROM sessions s JOIN released r ON r.name = s.id
            WHERE s.due_ms IS NOT NULL AND s.status IN {ACTIVE}""".encode(),
                {"name": lease.name, "token": lease.fencing_token, "channel": DUE_CHANNEL},
            ),
            lease=True,
            writes=True,
        )

    def lease(self, name: str) -> Lease | None:
        """The lease as stored, if anyone holds or held it (owner '' when released)."""
        row = self._db.statement(
            f"reading lease {name}",
            lambda db: one(
                db,
                "SELECT owner, fencing_token, expires_ms, takeovers FROM leases WHERE name = %s",
                (name,),
            ),
            lease=True,
        )
        return Lease(name, row[0] or "", row[1], row[2], row[3]) if row else None

    def _token(self, name: str) -> int | None:
        row = self._db.statement(
            f"reading lease {name}",
            lambda db: one(db, "SELECT fencing_token FROM leases WHERE name = %s", (name,)),
            lease=True,
        )
        return int(row[0]) if row else None
