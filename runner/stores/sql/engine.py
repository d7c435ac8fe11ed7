"""How a store part runs SQL, whichever the engine: four kinds of call, each named by
what it guarantees, so a part says what it needs and each engine says how.

- `read`: statements that change nothing.
- `snapshot`: several reads that see one state of the database.
- `change`: writes that are idempotent by construction (an upsert of fixed values, an
  update guarded by a token), which an engine may simply run again.
- `write`: a transaction applied exactly once, after checking that each fence's token
  is still the newest for its lease (FencedOut, nothing written, otherwise).

`lease=True` runs a call on the connection kept for leases, so that renewing a lease
never waits behind this process's data calls. `work` gets the engine's connection (a
Transaction) and runs the dialect's statements on it; `what` names the call in errors
and logs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from runner.stores.base import Lease
from runner.stores.sql.dialect import Dialect

T = TypeVar("T")


class Cursor(Protocol):
    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Transaction(Protocol):
    """What the shared parts use of a connection (sqlite3's and psycopg's alike)."""

    def execute(self, query: str, parameters: Any = ..., /) -> Cursor: ...


TxT = TypeVar("TxT", bound=Transaction)


class Engine(ABC, Generic[TxT]):
    dialect: Dialect
    #: What the engine raises for a duplicate primary key.
    unique_violation: type[Exception]

    @abstractmethod
    def read(self, what: str, work: Callable[[TxT], T], *, lease: bool = False) -> T: ...

    @abstractmethod
    def snapshot(self, what: str, work: Callable[[TxT], T]) -> T: ...

    @abstractmethod
    def change(self, what: str, work: Callable[[TxT], T], *, lease: bool = False) -> T: ...

    @abstractmethod
    def write(
        self,
        what: str,
        work: Callable[[TxT], T],
        *,
        fences: tuple[Lease, ...] = (),
        lease: bool = False,
    ) -> T: ...

    @abstractmethod
    def stamp(self) -> int:
        """Database time in epoch ms without a round trip, for what the store writes as a
        time (a session's updated_ms, a cache entry's expiry)."""


def one(tx: Transaction, query: str, parameters: Any = ()) -> Any:
    """The first row of `query`, or None."""
    return tx.execute(query, parameters).fetchone()


def rows(tx: Transaction, query: str, parameters: Any = ()) -> list[Any]:
    return tx.execute(query, parameters).fetchall()
