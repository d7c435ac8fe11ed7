"""SQLiteStore: the parts (runner.stores.sql, and this package's halves of them) on one
SQLite file."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import get_args

from runner.stores.base import StoreError
from runner.stores.composed import ComposedStore, ForwardsAudit, StoreParts
from runner.stores.sql.audit import SqlAuditLog
from runner.stores.sql.cache import SqlToolCache
from runner.stores.sql.leased import SqlLeasedSessions
from runner.stores.sql.ledger import SqlEffectLedger
from runner.stores.sqlite.call_claims import SQLiteCallClaims
from runner.stores.sqlite.engine import Connection, SQLiteEngine, Synchronous
from runner.stores.sqlite.events import SQLiteEventLog
from runner.stores.sqlite.leases import SQLiteLeases
from runner.stores.sqlite.schema import migrate
from runner.stores.sqlite.sessions import SQLiteSessions


class SQLiteStore(ForwardsAudit, ComposedStore):
    """Sessions, leases, the event log, the effect ledger, claims, the tool cache and the
    audit trail in one file.

    Two connections: one for leases only, so that renewing a lease never queues behind
    this process's other store calls, one for everything else (engine.py). Any thread
    may call any method.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_s: float = 10.0,
        lease_busy_timeout_s: float = 2.0,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        """`synchronous`: SQLite's setting for both connections. NORMAL (in WAL mode) loses
        no commit when this process dies, but may lose the last ones to a power cut or an
        OS crash; FULL syncs the log at every commit, and loses none to those either."""
        if synchronous not in get_args(Synchronous):
            raise ValueError(f"synchronous: expected NORMAL or FULL, got {synchronous!r}")
        self.path = Path(path)
        self.description = f"SQLite store {self.path}"
        self._leases: Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._data = Connection(self.path, busy_timeout_s, synchronous)
            with self._data.transaction() as db:
                migrate(db)
            self._leases = Connection(self.path, lease_busy_timeout_s, synchronous)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the store {self.path}: {exc}") from None
        engine = SQLiteEngine(self._data, self._leases)
        events = SQLiteEventLog(engine)
        sessions, leases = SQLiteSessions(engine, events, self.description), SQLiteLeases(engine)
        ComposedStore.__init__(self, StoreParts(
            sessions=sessions,
            leases=leases,
            events=events,
            ledger=SqlEffectLedger(engine),
            call_claims=SQLiteCallClaims(engine),
            cache=SqlToolCache(engine),
            leased=SqlLeasedSessions(engine, sessions, leases),
        ))  # fmt: skip
        self.audit = SqlAuditLog(engine, self.description)

    def close(self) -> None:
        self._data.close()
        if self._leases is not None:
            self._leases.close()

    @property
    def db(self) -> sqlite3.Connection:
        """The sessions connection, for inspection (PRAGMAs, counts) from one thread; the
        store's own methods take its lock, this does not."""
        return self._data.db

    @property
    def commits(self) -> int:
        """Write transactions this store has committed (both connections), for counting
        what an operation costs."""
        return self._data.commits + (self._leases.commits if self._leases is not None else 0)

    @property
    def _lease_db(self) -> Connection:
        assert self._leases is not None, "opened in __init__"
        return self._leases

    def schema_version(self) -> int:
        with self._data.reading() as db:
            version: int = db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0]
        return version
