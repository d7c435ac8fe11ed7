"""The PostgreSQL engine: the parts' four kinds of call on connections.py's Database
(reads and idempotent changes as autocommitted statements, run again on a transient
failure; writes as transactions applied exactly once; a snapshot as one read-only
REPEATABLE READ transaction), and the store's clock on this host.

A fenced write locks the lease rows `FOR SHARE` before its first write, so no newer
holder can appear between its check and its commit (what SQLite's single writer ensures).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import psycopg.errors

from runner.stores.base import FencedOut, Lease
from runner.stores.postgres.connections import Connection, Database
from runner.stores.sql.dialect import POSTGRES
from runner.stores.sql.engine import Engine, rows

T = TypeVar("T")


class PostgresEngine(Engine[Connection]):
    dialect = POSTGRES
    unique_violation = psycopg.errors.UniqueViolation

    def __init__(self, db: Database) -> None:
        self.db = db
        #: Database time minus this host's clock, last measured (see `stamp`).
        self.offset_ms = 0

    def read(self, what: str, work: Callable[[Connection], T], *, lease: bool = False) -> T:
        return self.db.statement(what, work, lease=lease)

    def snapshot(self, what: str, work: Callable[[Connection], T]) -> T:
        return self.db.snapshot(what, work)

    def change(self, what: str, work: Callable[[Connection], T], *, lease: bool = False) -> T:
        return self.db.statement(what, work, lease=lease, writes=True)

    def write(
        self,
        what: str,
        work: Callable[[Connection], T],
        *,
        fences: tuple[Lease, ...] = (),
        lease: bool = False,
    ) -> T:
        def fenced(db: Connection) -> T:
            check_fences(db, fences)
            return work(db)

        return self.db.write(what, fenced if fences else work, lease=lease)

    def align(self, database_ms: int) -> None:
        """Remember how far this host's clock is from the database's (`stamp`)."""
        self.offset_ms = database_ms - int(time.time() * 1000)

    def stamp(self) -> int:
        """This host's clock plus the offset last measured: a host whose clock is an hour
        off neither hides a session nor keeps a stale cache entry."""
        return int(time.time() * 1000) + self.offset_ms


def check_fences(db: Connection, fences: tuple[Lease, ...]) -> None:
    """Inside a write transaction: FencedOut unless each lease's token is the newest."""
    names = sorted({f.name for f in fences})
    held = rows(
        db,
        "SELECT name, fencing_token FROM leases WHERE name = ANY(%s) ORDER BY name FOR SHARE",
        (names,),
    )
    newest = {name: token for name, token in held}
    for fence in fences:
        if newest.get(fence.name) != fence.fencing_token:
            raise FencedOut(fence.name, fence.fencing_token, newest.get(fence.name))
