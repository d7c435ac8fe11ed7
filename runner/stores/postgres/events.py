"""PostgresStore's event log: writing a write's events in commit order, reading them,
and waking readers.

`seq` comes from the one `event_counter` row, updated (locked) by the writing
transaction as its last statement, so event-writing commits take turns: a transaction
gets its numbers only once the one before it has committed, and a reader that has seen
seq N has seen every smaller one. A write without events never takes that lock. The
same transaction sends a NOTIFY on `agents_runner_events` (delivered at commit, so never
for a write that failed), which `wait_for_events` listens for on a connection of its own.
"""

from __future__ import annotations

import builtins
import json
import logging
import threading
import time

import psycopg

from runner.state import TrackedCall
from runner.state.events import NewEvent
from runner.stores.base import Event, StoreError
from runner.stores.postgres.connections import Connection, Database, one, rows

logger = logging.getLogger(__name__)

#: NOTIFY channel: events were committed (payload: the newest seq).
EVENTS_CHANNEL = "agents_runner_events"


class EventLog:
    """PostgresStore's event log (a mixin: PostgresStore sets `_db` and
    `_event_listener` up)."""

    _db: Database
    _event_listener: Listener

    def _stored_states(
        self, db: Connection, session_id: str, calls: builtins.list[TrackedCall]
    ) -> dict[str, str]:
        """Inside the transaction: the stored state of each of `calls` that is stored."""
        if not calls:
            return {}
        found = rows(
            db,
            "SELECT call_id, document::json->>'state' FROM session_calls"
            " WHERE session_id = %s AND call_id = ANY(%s)",
            (session_id, [c.id for c in calls]),
        )
        return {call_id: state for call_id, state in found}

    def _write_events(
        self, db: Connection, session_id: str, events: builtins.list[NewEvent], at_ms: int
    ) -> None:
        """Inside the transaction, as its last statements (the counter's row lock is held
        until the commit)."""
        if not events:
            return
        row = one(
            db,
            "UPDATE event_counter SET last_seq = last_seq + %s WHERE id = 1 RETURNING last_seq",
            (len(events),),
        )
        if row is None:
            raise StoreError("the event_counter row is missing: the schema is damaged")
        first = int(row[0]) - len(events) + 1
        db.execute(
            "INSERT INTO events (seq, session_id, kind, call_id, data, at_ms)"
            " SELECT %s + n - 1, %s, k, c, d, %s"
            " FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS x (k, c, d, n)",
            (
                first,
                session_id,
                at_ms,
                [e.kind for e in events],
                [e.call_id for e in events],
                [json.dumps(e.data) for e in events],
            ),
        )
        db.execute("SELECT pg_notify(%s, %s)", (EVENTS_CHANNEL, str(int(row[0]))))

    def events(
        self, after: int, limit: int = 500, session_id: str | None = None
    ) -> builtins.list[Event]:
        columns = "SELECT seq, session_id, kind, call_id, data, at_ms FROM events"
        if session_id is None:
            query, parameters = f"{columns} WHERE seq > %s ORDER BY seq LIMIT %s", (after, limit)
        else:
            query = f"{columns} WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s"
            parameters = (session_id, after, limit)  # type: ignore[assignment]
        found = self._db.statement("reading events", lambda db: rows(db, query, parameters))
        return [Event(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in found]

    def last_event_seq(self) -> int:
        row = self._db.statement(
            "reading the event counter",
            lambda db: one(db, "SELECT last_seq FROM event_counter WHERE id = 1"),
        )
        return int(row[0]) if row else 0

    def wait_for_events(self, timeout_s: float) -> bool:
        """True once a NOTIFY says events were committed (by any process) since the last
        call returned, False after `timeout_s`."""
        return self._event_listener.wait(timeout_s)


class Listener:
    """A LISTEN connection of its own for one channel, opened at the first wait and again
    after a failure (meanwhile a wait sleeps, and its caller's polling carries on).
    Notifications that arrive between waits queue on the connection, so none is lost
    once the first wait has begun listening."""

    def __init__(self, db: Database, channel: str, description: str) -> None:
        self._db, self._channel, self._description = db, channel, description
        self._connection: Connection | None = None
        self._lock = threading.Lock()

    def wait(self, timeout_s: float) -> bool:
        give_up = time.monotonic() + timeout_s
        if not self._lock.acquire(timeout=timeout_s):
            return False  # another thread is listening
        try:
            if self._connection is None:
                self._connection = self._db.connect()
                self._connection.execute(f"LISTEN {self._channel}".encode())
            heard = False
            for _ in self._connection.notifies(
                timeout=max(0.0, give_up - time.monotonic()), stop_after=1
            ):
                heard = True
            if heard:  # several at once are one wake-up
                for _ in self._connection.notifies(timeout=0):
                    pass
            return heard
        except (psycopg.Error, StoreError) as exc:
            logger.warning("%s: listening on %s failed (%s); polling meanwhile",
                           self._description, self._channel, self._db.scrub(exc))  # fmt: skip
            self._drop()
            time.sleep(max(0.0, give_up - time.monotonic()))
            return False
        finally:
            self._lock.release()

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
