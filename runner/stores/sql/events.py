"""The event log, the half both engines share: reading it. Numbering events in commit
order and notifying readers differ (SQLite has one writer and notifies this process's
readers; PostgreSQL takes turns on a counter row and sends a NOTIFY): each engine's
events.py. The sessions part appends a write's events inside that write's transaction,
as its last statements (`append`), and tells the log once it committed (`committed`)."""

from __future__ import annotations

import json
from abc import abstractmethod
from typing import Generic

from runner.state.events import NewEvent
from runner.stores.base import Event, EventLog
from runner.stores.sql.engine import Engine, TxT, rows


class SqlEventLog(EventLog, Generic[TxT]):
    def __init__(self, engine: Engine[TxT]) -> None:
        self._engine = engine
        columns = "SELECT seq, session_id, kind, call_id, data, at_ms FROM events"
        sql = engine.dialect.sql
        self._after = sql(f"{columns} WHERE seq > ? ORDER BY seq LIMIT ?")
        self._of_session = sql(f"{columns} WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?")

    @abstractmethod
    def append(self, tx: TxT, session_id: str, events: list[NewEvent], at_ms: int) -> None:
        """Inside a write transaction, as its last statements: number and store `events`."""

    def committed(self, events: list[NewEvent]) -> None:
        """After the transaction that appended `events` committed."""

    def events(self, after: int, limit: int = 500, session_id: str | None = None) -> list[Event]:
        query = self._after if session_id is None else self._of_session
        parameters = (after, limit) if session_id is None else (session_id, after, limit)
        found = self._engine.read("reading events", lambda tx: rows(tx, query, parameters))
        return [Event(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in found]
