"""SQLiteStore's claims: deferred calls handed to external workers under a lease.

A claim is one `claims` row per call (see migration 6 in sqlite.py). Every change is one
`BEGIN IMMEDIATE` transaction on the sessions connection: SQLite's single writer is what
keeps two claimers from taking one call, and what makes a token check and the write it
guards one step. Claimable calls are found through the partial index on deferred calls
(`session_calls_deferred`), so the cost follows the deferred calls of the tools asked
for, not every open call.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Collection
from contextlib import AbstractContextManager
from typing import Any, Literal

from pydantic import ValidationError

from runner.state import TrackedCall
from runner.stores.base import (
    CLAIM_COLUMNS,
    Claim,
    ClaimLost,
    StoreError,
    claim_from_row,
)

#: Database time in epoch milliseconds (the same expression as sqlite.DB_NOW).
DB_NOW = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)"
#: Statuses whose deferred calls are handed out (not frozen, quarantined, cancelled...).
ACTIVE = "('running', 'waiting')"


class SQLiteClaims:
    """The claims section of SQLiteStore (a mixin: SQLiteStore provides these)."""

    # SQLiteStore's: a write transaction on the sessions connection, and reads on it.
    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _one(self, query: str, parameters: tuple[Any, ...] = ()) -> Any:
        raise NotImplementedError

    def _all(self, query: str, parameters: tuple[Any, ...] = ()) -> list[Any]:
        raise NotImplementedError

    def claim_calls(
        self, tools: Collection[str], worker: str, lease_s: float, limit: int
    ) -> list[Claim]:
        """Hand up to `limit` claimable calls of `tools` to `worker` for `lease_s`:
        deferred, not past their expiry, in a running or waiting session, and never
        claimed or released by a lapsed claim. Oldest first; each gets a fresh token."""
        names = sorted(set(tools))
        if not names or limit <= 0:
            return []
        lease_ms = int(lease_s * 1000)
        marks = ", ".join("?" * len(names))
        claims: list[Claim] = []
        with self._transaction() as db:
            now: int = db.execute(f"SELECT {DB_NOW}").fetchone()[0]
            found = db.execute(
                f"SELECT c.session_id, c.call_id, c.tool, c.document FROM session_calls c"
                f" JOIN sessions s ON s.id = c.session_id"
                f" LEFT JOIN claims k ON k.session_id = c.session_id AND k.call_id = c.call_id"
                f" WHERE c.state = 'deferred' AND c.tool IN ({marks})"
                f" AND s.status IN {ACTIVE} AND (k.state IS NULL OR k.state = 'released')"
                f" AND coalesce(json_extract(c.document, '$.expires_ms') > ?, 1)"
                f" ORDER BY c.rowid LIMIT ?",
                (*names, now, limit),
            ).fetchall()
            for session_id, call_id, tool, document in found:
                call = _call(session_id, document)
                claim = Claim(f"{uuid.uuid4()}", session_id, call_id, tool, worker, "held",
                              now + lease_ms, lease_ms, call.token, call)  # fmt: skip
                db.execute(
                    "INSERT INTO claims (session_id, call_id, token, tool, worker, state,"
                    " claimed_ms, expires_ms, lease_ms, continuation)"
                    " VALUES (?, ?, ?, ?, ?, 'held', ?, ?, ?, ?)"
                    " ON CONFLICT (session_id, call_id) DO UPDATE SET token = excluded.token,"
                    " tool = excluded.tool, worker = excluded.worker, state = 'held',"
                    " claimed_ms = excluded.claimed_ms, expires_ms = excluded.expires_ms,"
                    " lease_ms = excluded.lease_ms, continuation = excluded.continuation",
                    (session_id, call_id, claim.token, tool, worker, now, claim.expires_ms,
                     lease_ms, call.token),
                )  # fmt: skip
                claims.append(claim)
        return claims

    def claim(self, token: str) -> Claim | None:
        """The claim with this token, in whatever state, or None."""
        row = self._one(f"SELECT {CLAIM_COLUMNS} FROM claims WHERE token = ?", (token,))
        return claim_from_row(row) if row else None

    def renew_claim(self, token: str, lease_s: float | None = None) -> Claim:
        """Extend a held claim (or a released one nobody re-claimed) by `lease_s` from
        now (default: the lease it was claimed with). ClaimLost when it was re-claimed
        (state None), went to unknown_outcome (lapsed) or was finished (done)."""
        with self._transaction() as db:
            now: int = db.execute(f"SELECT {DB_NOW}").fetchone()[0]
            row = db.execute(
                f"SELECT {CLAIM_COLUMNS} FROM claims WHERE token = ?", (token,)
            ).fetchone()
            if row is None:
                raise ClaimLost(token)
            claim = claim_from_row(row)
            if claim.state in ("lapsed", "done"):
                raise ClaimLost(token, claim.state)
            lease_ms = claim.lease_ms if lease_s is None else int(lease_s * 1000)
            db.execute(
                "UPDATE claims SET state = 'held', expires_ms = ?, lease_ms = ? WHERE token = ?",
                (now + lease_ms, lease_ms, token),
            )
        return Claim(token, claim.session_id, claim.call_id, claim.tool, claim.worker, "held",
                     now + lease_ms, lease_ms, claim.continuation)  # fmt: skip

    def finish_claim(self, token: str) -> Claim:
        """Mark the claim done, in whatever state it is, before its result is applied;
        ClaimLost (nothing changed) when no claim has this token."""
        with self._transaction() as db:
            row = db.execute(
                f"UPDATE claims SET state = 'done' WHERE token = ? RETURNING {CLAIM_COLUMNS}",
                (token,),
            ).fetchone()
        if row is None:
            raise ClaimLost(token)
        return claim_from_row(row)

    def lapsed_claims(self, limit: int) -> list[Claim]:
        """Held claims whose lease has lapsed, and lapsed ones whose call is still
        deferred (a sweep that stopped before moving it to unknown_outcome)."""
        rows = self._all(
            f"SELECT {CLAIM_COLUMNS} FROM claims WHERE state = 'held'"
            f" AND expires_ms <= {DB_NOW}"
            f" UNION ALL SELECT {_prefixed('k')} FROM claims k JOIN session_calls c"
            f" ON c.session_id = k.session_id AND c.call_id = k.call_id"
            f" WHERE k.state = 'lapsed' AND c.state = 'deferred' LIMIT ?",
            (limit,),
        )
        return [claim_from_row(row) for row in rows]

    def settle_lapsed(self, token: str, state: Literal["released", "lapsed"]) -> bool:
        """Move a held claim whose lease has lapsed to `state`; True if it is now in
        `state` (also when it already was), False when it was renewed or finished."""
        with self._transaction() as db:
            changed = db.execute(
                f"UPDATE claims SET state = ? WHERE token = ?"
                f" AND ((state = 'held' AND expires_ms <= {DB_NOW}) OR state = ?)",
                (state, token, state),
            ).rowcount
        return changed > 0

    def reopen_claims(self, session_id: str, call_id: str) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE claims SET state = 'released' WHERE session_id = ? AND call_id = ?"
                " AND state = 'lapsed'",
                (session_id, call_id),
            )


def _prefixed(alias: str) -> str:
    return ", ".join(f"{alias}.{column.strip()}" for column in CLAIM_COLUMNS.split(","))


def _call(session_id: str, document: str) -> TrackedCall:
    try:
        return TrackedCall.model_validate_json(document)
    except ValidationError as exc:
        raise StoreError(f"cannot read a call of session {session_id}: {exc}") from None


__all__ = ["SQLiteClaims"]
