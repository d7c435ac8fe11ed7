"""A session's lease with its load, and its save with the lease's release, each one
transaction on the data connection, the same on both engines (runner.stores.base's
LeasedSessions): what an operation on a session begins and ends with costs one round
trip each, not two (three by continuation token, with its lookup).

`lease_and_load` takes the lease first (each engine's `acquire_in`, as `acquire_lease`
does), then reads the session with its header row locked (as a save locks it first, so
locks are taken in the order a fenced save takes them, and no save commits between the
reads). A session that is not there is SessionNotFound, raised inside the transaction,
so the lease it took is rolled back with it. `save_and_release` is `save`'s
transaction, fenced by the lease, with the engine's `release_in` before its events.
"""

from __future__ import annotations

from typing import Generic

from runner.state import SessionT
from runner.stores.base import Continuation, Lease, LeasedSession, LeasedSessions
from runner.stores.sql.engine import Engine, TxT
from runner.stores.sql.leases import SqlLeases
from runner.stores.sql.sessions import SessionRows, SqlSessions

#: What the transaction of `lease_and_load` found: the lease and the session's rows,
#: or None while a live holder has the lease.
Taken = tuple[Lease, SessionRows] | None


class SqlLeasedSessions(LeasedSessions, Generic[TxT]):
    def __init__(
        self, engine: Engine[TxT], sessions: SqlSessions[TxT], leases: SqlLeases[TxT]
    ) -> None:
        self._engine, self._sessions, self._leases = engine, sessions, leases

    def _take(self, tx: TxT, session_id: str, owner: str, ttl_ms: int) -> Taken:
        lease = self._leases.acquire_in(tx, session_id, owner, ttl_ms)
        if lease is None:
            return None
        return lease, self._sessions.read_in(tx, session_id, history=False, lock=True)

    def _loaded(self, session_id: str, taken: Taken) -> LeasedSession | None:
        if taken is None:
            return None
        lease, read = taken
        return LeasedSession(lease, self._sessions.decode(session_id, read))

    def lease_and_load(self, session_id: str, owner: str, ttl_s: float) -> LeasedSession | None:
        ttl_ms = int(ttl_s * 1000)
        taken = self._engine.write(
            f"taking the lease of session {session_id} and loading it",
            lambda tx: self._take(tx, session_id, owner, ttl_ms),
        )
        return self._loaded(session_id, taken)

    def lease_and_load_token(
        self, token: str, owner: str, ttl_s: float
    ) -> LeasedSession | Continuation | None:
        ttl_ms = int(ttl_s * 1000)

        def work(tx: TxT) -> tuple[Continuation | None, Taken]:
            found = self._sessions.find_in(tx, token)
            if found is None:
                return None, None
            return found, self._take(tx, found.session_id, owner, ttl_ms)

        found, taken = self._engine.write(
            "taking the lease of the session of a continuation token and loading it", work
        )
        if found is None:
            return None
        return self._loaded(found.session_id, taken) or found

    def save_and_release(self, session: SessionT, lease: Lease) -> SessionT:
        return self._sessions.save_with(
            session,
            (lease,),
            then=lambda tx: self._leases.release_in(tx, lease),
            what=f"saving session {session.id} and releasing its lease",
        )
