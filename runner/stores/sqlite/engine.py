"""The SQLite engine: one file in WAL mode, two connections, transactions that take the
write lock up front.

One connection is for sessions and everything else, one for leases only, so that
renewing a lease never queues behind this process's other store calls. Each is used by
one thread at a time (a lock), any thread may call. SQLite has one writer: a write
transaction (`BEGIN IMMEDIATE`) sees the newest state and nothing changes under it
until it commits, which is what makes a fence check and the write it guards one step.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, TypeVar

from runner.faults import crash_point
from runner.stores.base import FencedOut, Lease
from runner.stores.sql.dialect import SQLITE
from runner.stores.sql.engine import Engine

T = TypeVar("T")
#: SQLite's `synchronous` settings a store may use (WAL mode: see SQLiteStore).
Synchronous = Literal["NORMAL", "FULL"]


class Connection:
    """One sqlite3 connection and the lock that gives it to one thread at a time."""

    def __init__(self, path: Path, busy_timeout_s: float, synchronous: Synchronous) -> None:
        # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE below).
        self.db = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None,
                                  check_same_thread=False)  # fmt: skip
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={synchronous}")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.lock = threading.RLock()
        self.commits = 0  # write transactions committed on this connection

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            yield self.db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the write lock up front (no upgrade deadlock)."""
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
                crash_point("store.commit")  # inside the transaction: all or nothing
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
            self.commits += 1

    def close(self) -> None:
        with self.lock:
            self.db.close()


class SQLiteEngine(Engine[sqlite3.Connection]):
    """Reads on a connection as it is; every write (idempotent or not) a transaction."""

    dialect = SQLITE
    unique_violation = sqlite3.IntegrityError

    def __init__(self, data: Connection, leases: Connection) -> None:
        self.data, self.leases = data, leases

    def read(self, what: str, work: Callable[[sqlite3.Connection], T], *, lease: bool = False) -> T:
        with (self.leases if lease else self.data).reading() as db:
            return work(db)

    def snapshot(self, what: str, work: Callable[[sqlite3.Connection], T]) -> T:
        # One connection, used by one thread at a time, reads one state between writes.
        with self.data.reading() as db:
            return work(db)

    def change(
        self, what: str, work: Callable[[sqlite3.Connection], T], *, lease: bool = False
    ) -> T:
        with (self.leases if lease else self.data).transaction() as db:
            return work(db)

    def write(
        self,
        what: str,
        work: Callable[[sqlite3.Connection], T],
        *,
        fences: tuple[Lease, ...] = (),
        lease: bool = False,
    ) -> T:
        with (self.leases if lease else self.data).transaction() as db:
            for fence in fences:
                newest = newest_token(db, fence.name)
                if newest != fence.fencing_token:
                    raise FencedOut(fence.name, fence.fencing_token, newest)
            return work(db)

    def stamp(self) -> int:
        return int(time.time() * 1000)


def newest_token(db: sqlite3.Connection, name: str) -> int | None:
    row = db.execute("SELECT fencing_token FROM leases WHERE name = ?", (name,)).fetchone()
    return row[0] if row else None
