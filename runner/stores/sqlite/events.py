"""SQLiteStore's event log: `seq` is the table's AUTOINCREMENT key, which is commit order
since SQLite has one writer. `wait_for_events` is notified of this process's own commits, and
polls for other processes'."""

from __future__ import annotations

import json
import sqlite3
import threading

from runner.state.events import NewEvent
from runner.stores.sql.engine import one
from runner.stores.sql.events import SqlEventLog
from runner.stores.sqlite.engine import SQLiteEngine


class SQLiteEventLog(SqlEventLog[sqlite3.Connection]):
    def __init__(self, engine: SQLiteEngine) -> None:
        super().__init__(engine)
        #: Bumped after each commit that wrote events, for `wait_for_events`.
        self._events_written = threading.Condition()
        self._event_generation = self._event_seen = 0

    def append(
        self, tx: sqlite3.Connection, session_id: str, events: list[NewEvent], at_ms: int
    ) -> None:
        if events:
            tx.executemany(
                "INSERT INTO events (session_id, kind, call_id, data, at_ms)"
                " VALUES (?, ?, ?, ?, ?)",
                [(session_id, e.kind, e.call_id, json.dumps(e.data), at_ms) for e in events],
            )

    def committed(self, events: list[NewEvent]) -> None:
        """Notify `wait_for_events` if the commit wrote any."""
        if events:
            with self._events_written:
                self._event_generation += 1
                self._events_written.notify_all()

    def last_event_seq(self) -> int:
        newest = "SELECT COALESCE(MAX(seq), 0) FROM events"
        row = self._engine.read("reading the newest event", lambda db: one(db, newest))
        return int(row[0])

    def wait_for_events(self, timeout_s: float) -> bool:
        """True as soon as this store has committed events since the last call returned;
        False after `timeout_s` (another process's writes are only found by reading)."""
        with self._events_written:
            woke = self._events_written.wait_for(
                lambda: self._event_generation != self._event_seen, timeout_s
            )
            self._event_seen = self._event_generation
        return woke
