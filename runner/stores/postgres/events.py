"""PostgresStore's event log: writing a write's events in commit order and notifying
readers (runner.stores.sql.events reads them).

`seq` comes from the one `event_counter` row, updated (locked) by the writing
transaction as its last statement, so event-writing commits take turns: a transaction
gets its numbers only once the one before it has committed, and a reader that has seen
seq N has seen every smaller one. A write without events never takes that lock. The
same transaction sends a NOTIFY on `agents_runner_events` (delivered at commit, so never
for a write that failed), which `wait_for_events` listens for on a connection of its own.
"""

from __future__ import annotations

import json

from runner.state.events import NewEvent
from runner.stores.base import StoreError
from runner.stores.postgres.connections import Connection, Listener
from runner.stores.postgres.engine import PostgresEngine
from runner.stores.sql.engine import one
from runner.stores.sql.events import SqlEventLog

#: NOTIFY channel: events were committed (payload: the newest seq).
EVENTS_CHANNEL = "agents_runner_events"


class PostgresEventLog(SqlEventLog[Connection]):
    def __init__(self, engine: PostgresEngine, description: str) -> None:
        super().__init__(engine)
        self._listener = Listener(engine.db, EVENTS_CHANNEL, description)

    def close(self) -> None:
        self._listener.close()

    def append(self, tx: Connection, session_id: str, events: list[NewEvent], at_ms: int) -> None:
        """As the transaction's last statements (the counter's row lock is held until the
        commit)."""
        if not events:
            return
        row = one(
            tx,
            "UPDATE event_counter SET last_seq = last_seq + %s WHERE id = 1 RETURNING last_seq",
            (len(events),),
        )
        if row is None:
            raise StoreError("the event_counter row is missing: the schema is damaged")
        first = int(row[0]) - len(events) + 1
        tx.execute(
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
        tx.execute("SELECT pg_notify(%s, %s)", (EVENTS_CHANNEL, str(int(row[0]))))

    def last_event_seq(self) -> int:
        row = self._engine.read(
            "reading the event counter",
            lambda db: one(db, "SELECT last_seq FROM event_counter WHERE id = 1"),
        )
        return int(row[0]) if row else 0

    def wait_for_events(self, timeout_s: float) -> bool:
        """True once a NOTIFY says events were committed (by any process) since the last
        call returned, False after `timeout_s`."""
        return self._listener.wait(timeout_s)
