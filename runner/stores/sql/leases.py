"""Leases and due work, the half both engines share: reading a lease and the clock,
renewing (one update guarded by the fencing token), and the calls that take and release
a lease. What taking and releasing write (`acquire_in`, `release_in`, which
runner.stores.sql.leased also runs inside a session's transaction) and offering due
sessions differ: SQLite has one writer, PostgreSQL many hosts polling at once (each
engine's leases.py).

Everything here runs on the engine's lease connection (`lease=True`), so that renewing
a lease never waits behind this process's data calls."""

from __future__ import annotations

from abc import abstractmethod
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

    # --- what each engine says --------------------------------------------------------

    @abstractmethod
    def acquire_in(self, tx: TxT, name: str, owner: str, ttl_ms: int) -> Lease | None:
        """Inside a write transaction: take the lease (a new one with the next token, a
        takeover counted when its last holder never released it), or None while a live
        holder has it."""

    @abstractmethod
    def release_in(self, tx: TxT, lease: Lease) -> None:
        """Inside a transaction: give the lease up cleanly (a clean release resets the
        takeover count) if its token is still the newest; nothing otherwise."""

    # --- the contract -------------------------------------------------------------------

    def acquire_lease(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        ttl_ms = int(ttl_s * 1000)
        return self._engine.write(
            f"acquiring lease {name}",
            lambda tx: self.acquire_in(tx, name, owner, ttl_ms),
            lease=True,
        )

    def release_lease(self, lease: Lease) -> None:
        self._engine.change(
            f"releasing lease {lease.name}", lambda tx: self.release_in(tx, lease), lease=True
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
