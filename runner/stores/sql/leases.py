"""Leases and due work, the half both engines share: reading a lease and the clock, and
renewing (one update guarded by the fencing token). Taking and releasing a lease and
offering due sessions differ: SQLite has one writer, PostgreSQL many hosts polling at
once (each engine's leases.py).

Everything here runs on the engine's lease connection (`lease=True`), so that renewing
a lease never waits behind this process's data calls."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Generic

from runner.stores.base import FencedOut, Lease, Leases
from runner.stores.sql.engine import Engine, TxT, one


class SqlLeases(Leases, Generic[TxT]):
    def __init__(self, engine: Engine[TxT]) -> None:
        self._engine = engine
        sql = engine.dialect.sql
        self._now = sql("SELECT {now}")
        self._lease = sql(
            "SELECT owner, fencing_token, expires_ms, takeovers FROM leases WHERE name = ?"
        )
        self._token = sql("SELECT fencing_token FROM leases WHERE name = ?")
        self._renew = sql(
            "UPDATE leases SET expires_ms = {now} + ? WHERE name = ? AND fencing_token = ?"
            " RETURNING expires_ms"
        )

    def now_ms(self) -> int:
        """Database time: what leases are measured against."""
        row = self._engine.read("reading the clock", lambda tx: one(tx, self._now), lease=True)
        return int(row[0])

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        """One update guarded by the token: idempotent (a retry extends from a later now)."""
        values = (int(ttl_s * 1000), lease.name, lease.fencing_token)
        row = self._engine.change(
            f"renewing lease {lease.name}", lambda tx: one(tx, self._renew, values), lease=True
        )
        if row is None:
            raise FencedOut(lease.name, lease.fencing_token, self.newest_token(lease.name))
        return replace(lease, expires_ms=int(row[0]))

    def lease(self, name: str) -> Lease | None:
        """The lease as stored, if anyone holds or held it (owner '' when released)."""
        row = self._engine.read(
            f"reading lease {name}", lambda tx: one(tx, self._lease, (name,)), lease=True
        )
        return Lease(name, row[0] or "", row[1], row[2], row[3]) if row else None

    def newest_token(self, name: str) -> int | None:
        row: Any = self._engine.read(
            f"reading lease {name}", lambda tx: one(tx, self._token, (name,)), lease=True
        )
        return int(row[0]) if row else None
