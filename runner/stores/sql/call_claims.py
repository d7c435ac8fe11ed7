"""Deferred-call claims, the half both engines share: a deferred call handed to a
claimer until `expires_ms` (store time), one `claims` row per call, whose token
fences (a re-claim writes a new one). Every change here is one statement guarded by the
token, so it is idempotent; picking claimable calls (`claim_calls`) differs, as SQLite
has one writer and PostgreSQL skips what concurrent claimers lock (each engine's
call_claims.py). Claims are data, not leases: they use the data connection."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection
from typing import Generic, Literal

from runner.stores.base import CallClaims, Claim, ClaimLost
from runner.stores.sql.engine import Engine, TxT, one, rows
from runner.stores.sql.rows import CLAIM_COLUMNS, claim_columns, claim_from_row

#: How a claim is written over the row of an earlier one (released, or an engine's own
#: condition): every column but the call's key is the new claim's.
REPLACE_CLAIM = (
    "ON CONFLICT (session_id, call_id) DO UPDATE SET token = excluded.token,"
    " tool = excluded.tool, worker = excluded.worker, state = 'held',"
    " claimed_ms = excluded.claimed_ms, expires_ms = excluded.expires_ms,"
    " lease_ms = excluded.lease_ms, continuation = excluded.continuation"
)


class SqlCallClaims(CallClaims, Generic[TxT]):
    def __init__(self, engine: Engine[TxT]) -> None:
        self._engine = engine
        sql = engine.dialect.sql
        self._claim = sql(f"SELECT {CLAIM_COLUMNS} FROM claims WHERE token = ?")
        self._renew = sql(
            "UPDATE claims SET state = 'held', lease_ms = coalesce(?, lease_ms),"
            " expires_ms = {now} + coalesce(?, lease_ms)"
            f" WHERE token = ? AND state IN ('held', 'released') RETURNING {CLAIM_COLUMNS}"
        )
        self._finish = sql(
            f"UPDATE claims SET state = 'done' WHERE token = ? RETURNING {CLAIM_COLUMNS}"
        )
        self._lapsed = sql(
            f"SELECT {CLAIM_COLUMNS} FROM claims WHERE state = 'held' AND expires_ms <= {{now}}"
            f" UNION ALL SELECT {claim_columns('k')} FROM claims k JOIN session_calls c"
            " ON c.session_id = k.session_id AND c.call_id = k.call_id"
            " WHERE k.state = 'lapsed' AND c.state = 'deferred' LIMIT ?"
        )
        self._settle = sql(
            "UPDATE claims SET state = ? WHERE token = ?"
            " AND ((state = 'held' AND expires_ms <= {now}) OR state = ?) RETURNING token"
        )
        self._reopen = sql(
            "UPDATE claims SET state = 'released' WHERE session_id = ? AND call_id = ?"
            " AND state = 'lapsed'"
        )

    def claim_calls(
        self, tools: Collection[str], claimer: str, lease_s: float, limit: int
    ) -> list[Claim]:
        """Hand up to `limit` claimable calls of `tools` to `claimer` for `lease_s`:
        deferred, not past their expiry, in a running or waiting session, and never
        claimed or released by a lapsed claim. Oldest first; each gets a fresh token."""
        names = sorted(set(tools))
        if not names or limit <= 0:
            return []
        return self._pick_and_claim(names, claimer, int(lease_s * 1000), limit)

    @abstractmethod
    def _pick_and_claim(
        self, names: list[str], claimer: str, lease_ms: int, limit: int
    ) -> list[Claim]:
        """The engine's one transaction that picks claimable calls of `names` and writes
        their claims (`REPLACE_CLAIM` over a released row)."""

    def claim(self, token: str) -> Claim | None:
        row = self._engine.read("reading a claim", lambda tx: one(tx, self._claim, (token,)))
        return claim_from_row(row) if row else None

    def renew_claim(self, token: str, lease_s: float | None = None) -> Claim:
        """Extend a held claim (or a released one nobody re-claimed) by `lease_s` from
        now (default: the lease it was claimed with). ClaimLost when it was re-claimed
        (state None), went to unknown_outcome (lapsed) or was finished (done)."""
        lease_ms = None if lease_s is None else int(lease_s * 1000)
        row = self._engine.change(
            f"renewing claim {token}",
            lambda tx: one(tx, self._renew, (lease_ms, lease_ms, token)),
        )
        if row is not None:
            return claim_from_row(row)
        found = self.claim(token)
        raise ClaimLost(token, found.state if found else None)

    def finish_claim(self, token: str) -> Claim:
        """Mark the claim done, in whatever state it is, before its result is applied;
        ClaimLost (nothing changed) when no claim has this token."""
        row = self._engine.change(
            f"finishing claim {token}", lambda tx: one(tx, self._finish, (token,))
        )
        if row is None:
            raise ClaimLost(token)
        return claim_from_row(row)

    def lapsed_claims(self, limit: int) -> list[Claim]:
        """Held claims whose lease has lapsed, and lapsed ones whose call is still
        deferred (a sweep that stopped before moving it to unknown_outcome)."""
        found = self._engine.read(
            "finding lapsed claims", lambda tx: rows(tx, self._lapsed, (limit,))
        )
        return [claim_from_row(row) for row in found]

    def settle_lapsed(self, token: str, state: Literal["released", "lapsed"]) -> bool:
        """Move a held claim whose lease has lapsed to `state`; True if it is now in
        `state` (also when it already was), False when it was renewed or finished."""
        row = self._engine.change(
            f"settling claim {token}", lambda tx: one(tx, self._settle, (state, token, state))
        )
        return row is not None

    def reopen_claims(self, session_id: str, call_id: str) -> None:
        self._engine.change(
            f"reopening the claim of call {call_id} of session {session_id}",
            lambda tx: tx.execute(self._reopen, (session_id, call_id)),
        )
