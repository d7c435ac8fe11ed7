"""PostgresStore's leases and due-session offers: how workers on many hosts share
sessions (runner.stores.sql.leases has the half SQLite shares).

Taking a lease is a single upsert that succeeds only once the last holder released it or
let it expire (a takeover, counted); fencing tokens only grow. Lease calls use the lease
pool (short lock timeout, a budget of their own), so a renewal never waits behind data
calls. `due_sessions` offers rows it takes `FOR UPDATE SKIP LOCKED`; `wait_for_due`
listens for the NOTIFY the store sends when a session becomes due and offerable. An
offer hands nothing over: the worker still takes the session's lease.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection
from typing import Any

from runner.stores.base import Lease
from runner.stores.postgres.connections import Connection, Listener
from runner.stores.postgres.engine import PostgresEngine
from runner.stores.sql.dialect import ACTIVE_STATUSES
from runner.stores.sql.engine import one, rows
from runner.stores.sql.leases import SqlLeases

logger = logging.getLogger(__name__)

#: NOTIFY channel: a session may have become due (payload: its id).
DUE_CHANNEL = "agents_runner_due"


class PostgresLeases(SqlLeases[Connection]):
    def __init__(self, engine: PostgresEngine, offer_s: float, description: str) -> None:
        super().__init__(engine)
        self._pg = engine
        #: Who `due_sessions` offers sessions to: this store instance (see there).
        self._instance = f"{uuid.uuid4()}"
        self._offer_ms = int(offer_s * 1000)
        self._due_listener = Listener(engine.db, DUE_CHANNEL, description)
        now = engine.dialect.now_ms
        self._acquire = f"""
            INSERT INTO leases AS l (name, owner, expires_ms, fencing_token, takeovers)
            VALUES (%(name)s, %(owner)s, {now} + %(ttl)s, 1, 0)
            ON CONFLICT (name) DO UPDATE SET owner = excluded.owner,
                expires_ms = excluded.expires_ms, fencing_token = l.fencing_token + 1,
                takeovers = CASE WHEN l.owner IS NULL THEN 0 ELSE l.takeovers + 1 END
            WHERE l.owner IS NULL OR l.expires_ms <= excluded.expires_ms - %(ttl)s
            RETURNING fencing_token, expires_ms, takeovers"""
        self._release = f"""WITH released AS (
                UPDATE leases SET owner = NULL, expires_ms = 0, takeovers = 0
                WHERE name = %(name)s AND fencing_token = %(token)s RETURNING name)
            SELECT pg_notify(%(channel)s, s.id) FROM sessions s JOIN released r ON r.name = s.id
            WHERE s.due_ms IS NOT NULL AND s.status IN {ACTIVE_STATUSES}"""
        self._due = f"""
            WITH clock AS (SELECT {now} AS ms),
            picked AS (
                SELECT s.id, s.due_ms, s.seq FROM sessions s CROSS JOIN clock
                LEFT JOIN leases l ON l.name = s.id
                WHERE s.due_ms <= clock.ms AND s.status IN {ACTIVE_STATUSES}
                  AND (l.owner IS NULL OR l.expires_ms <= clock.ms)
                  AND (s.offered_until_ms IS NULL OR s.offered_until_ms <= clock.ms
                       OR s.offered_to = %(me)s)
                  AND NOT (s.id = ANY(%(exclude)s))
                ORDER BY s.due_ms, s.seq LIMIT %(limit)s
                FOR UPDATE OF s SKIP LOCKED)
            UPDATE sessions s SET offered_to = %(me)s,
                offered_until_ms = (SELECT ms FROM clock) + %(offer)s
            FROM picked WHERE s.id = picked.id
            RETURNING s.id, picked.due_ms, picked.seq"""

    def close(self) -> None:
        self._due_listener.close()

    def now_ms(self) -> int:
        """Database time: what leases are measured against (and this host's clock is
        measured against, for the engine's `stamp`)."""
        now = super().now_ms()
        self._pg.align(now)
        return now

    def acquire_in(self, tx: Connection, name: str, owner: str, ttl_ms: int) -> Lease | None:
        """One upsert: a new lease, or the next token when the last holder released it or
        let it expire (a takeover, counted), or nothing while a live holder has it."""
        row = one(tx, self._acquire, {"name": name, "owner": owner, "ttl": ttl_ms})
        if row is None:
            return None
        self._pg.align(int(row[1]) - ttl_ms)  # the lease starts at the database's now
        return Lease(name, owner, row[0], row[1], row[2])

    def release_in(self, tx: Connection, lease: Lease) -> None:
        """Give the lease up cleanly, and notify idle session workers if the session is due: no one
        else could take it until now (the NOTIFY goes out at the commit)."""
        values = {"name": lease.name, "token": lease.fencing_token, "channel": DUE_CHANNEL}
        tx.execute(self._release, values)

    def due_sessions(self, limit: int, exclude: Collection[str] = ()) -> list[str]:
        """Sessions a worker can advance now: due, and not leased by a live holder.

        Concurrent callers get disjoint sessions: rows are taken with `FOR UPDATE SKIP
        LOCKED` and marked as offered to this store instance for `offer_s`, during which
        other instances pass them over (the one offered takes their leases meanwhile).
        This instance sees its own offers again, so to one caller it behaves exactly as
        SQLiteStore.due_sessions does."""
        if limit <= 0:
            return []
        values: dict[str, Any] = {"me": self._instance, "exclude": list(exclude),
                                  "limit": limit, "offer": self._offer_ms}  # fmt: skip
        # One statement, idempotent for this instance: a retry offers the same sessions.
        # It writes only offers, not state a crash could leave half done: run as a read.
        offered = self._engine.read("finding due sessions", lambda db: rows(db, self._due, values))
        return [row[0] for row in sorted(offered, key=lambda r: (r[1], r[2]))]

    def wait_for_due(self, timeout_s: float) -> bool:
        """Block until a NOTIFY says a session may be due (True) or `timeout_s` passes
        (False), on a LISTEN connection of its own (see Listener)."""
        return self._due_listener.wait(timeout_s)
