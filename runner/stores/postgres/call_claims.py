"""PostgresStore's claims: deferred calls handed to external workers under a lease.

As SQLiteStore's (runner.stores.sqlite_claims), with many claimers on many hosts at once:
`claim_calls` is one statement that locks the calls it picks `FOR UPDATE SKIP LOCKED`
(concurrent claimers never wait for each other and pass over what another is taking),
and writes the claims with an upsert that only replaces a `released` row, so a claimer
whose snapshot predates another's commit cannot take the call a second time. Token checks
are single guarded statements. Claims use the data pool: they are data, not leases.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection
from typing import Any, Literal

from pydantic import ValidationError

from runner.state import TrackedCall
from runner.stores.base import CLAIM_COLUMNS, Claim, ClaimLost, StoreError, claim_from_row
from runner.stores.postgres.claims import ACTIVE, DB_NOW
from runner.stores.postgres.connections import Connection, Database, one, rows


class CallClaims:
    """The claims section of PostgresStore (a mixin: PostgresStore sets `_db` up)."""

    _db: Database

    def claim_calls(
        self, tools: Collection[str], worker: str, lease_s: float, limit: int
    ) -> builtins.list[Claim]:
        """Hand up to `limit` claimable calls of `tools` to `worker` for `lease_s`:
        deferred, not past their expiry, in a running or waiting session, and never
        claimed or released by a lapsed claim. Oldest first; each gets a fresh token."""
        names = sorted(set(tools))
        if not names or limit <= 0:
            return []
        lease_ms = int(lease_s * 1000)

        def work(db: Connection) -> list[tuple[Any, ...]]:
            return rows(
                db,
                f"""
                WITH clock AS (SELECT {DB_NOW} AS ms),
                picked AS (
                    SELECT c.session_id, c.call_id, c.tool, c.document, c.seq
                    FROM session_calls c JOIN sessions s ON s.id = c.session_id
                    LEFT JOIN claims k ON k.session_id = c.session_id AND k.call_id = c.call_id
                    CROSS JOIN clock
                    WHERE c.state = 'deferred' AND c.tool = ANY(%(tools)s)
                      AND s.status IN {ACTIVE} AND (k.state IS NULL OR k.state = 'released')
                      AND coalesce((c.document::jsonb ->> 'expires_ms')::bigint > clock.ms,
                                   true)
                    ORDER BY c.seq LIMIT %(limit)s
                    FOR UPDATE OF c SKIP LOCKED),
                claimed AS (
                    INSERT INTO claims AS k (session_id, call_id, token, tool, worker, state,
                                             claimed_ms, expires_ms, lease_ms, continuation)
                    SELECT p.session_id, p.call_id, gen_random_uuid()::text, p.tool,
                           %(worker)s, 'held', clock.ms, clock.ms + %(lease)s, %(lease)s,
                           p.document::jsonb ->> 'token'
                    FROM picked p CROSS JOIN clock
                    ON CONFLICT (session_id, call_id) DO UPDATE SET token = excluded.token,
                        tool = excluded.tool, worker = excluded.worker, state = 'held',
                        claimed_ms = excluded.claimed_ms, expires_ms = excluded.expires_ms,
                        lease_ms = excluded.lease_ms, continuation = excluded.continuation
                    WHERE k.state = 'released'
                    RETURNING {CLAIM_COLUMNS})
                SELECT {", ".join(f"c.{name.strip()}" for name in CLAIM_COLUMNS.split(","))},
                       p.document
                FROM claimed c JOIN picked p
                  ON p.session_id = c.session_id AND p.call_id = c.call_id
                ORDER BY p.seq""",
                {"tools": names, "limit": limit, "worker": worker, "lease": lease_ms},
            )

        # One transaction: applied once (see connections), tokens made by the database.
        claimed = self._db.write(f"claiming calls of {', '.join(names)}", work)
        return [claim_from_row(row[:9], _call(row[1], row[9])) for row in claimed]

    def claim(self, token: str) -> Claim | None:
        """The claim with this token, in whatever state, or None."""
        row = self._db.statement(
            "reading a claim",
            lambda db: one(db, f"SELECT {CLAIM_COLUMNS} FROM claims WHERE token = %s", (token,)),
        )
        return claim_from_row(row) if row else None

    def renew_claim(self, token: str, lease_s: float | None = None) -> Claim:
        """Extend a held claim (or a released one nobody re-claimed) by `lease_s` from
        now (default: the lease it was claimed with). ClaimLost when it was re-claimed
        (state None), went to unknown_outcome (lapsed) or was finished (done)."""

        def work(db: Connection) -> tuple[Any, ...] | None:
            return one(
                db,
                f"UPDATE claims SET state = 'held', lease_ms = coalesce(%(lease)s, lease_ms),"
                f" expires_ms = {DB_NOW} + coalesce(%(lease)s, lease_ms)"
                f" WHERE token = %(token)s AND state IN ('held', 'released')"
                f" RETURNING {CLAIM_COLUMNS}",
                {"token": token, "lease": None if lease_s is None else int(lease_s * 1000)},
            )

        # Guarded by the token and idempotent (a retry extends from a later now).
        row = self._db.statement(f"renewing claim {token}", work, writes=True)
        if row is not None:
            return claim_from_row(row)
        found = self.claim(token)
        raise ClaimLost(token, found.state if found else None)

    def finish_claim(self, token: str) -> Claim:
        """Mark the claim done, in whatever state it is, before its result is applied;
        ClaimLost (nothing changed) when no claim has this token."""
        row = self._db.statement(
            f"finishing claim {token}",
            lambda db: one(
                db,
                f"UPDATE claims SET state = 'done' WHERE token = %s RETURNING {CLAIM_COLUMNS}",
                (token,),
            ),
            writes=True,
        )
        if row is None:
            raise ClaimLost(token)
        return claim_from_row(row)

    def lapsed_claims(self, limit: int) -> builtins.list[Claim]:
        """Held claims whose lease has lapsed, and lapsed ones whose call is still
        deferred (a sweep that stopped before moving it to unknown_outcome)."""
        columns = ", ".join(f"k.{c.strip()}" for c in CLAIM_COLUMNS.split(","))
        found = self._db.statement(
            "finding lapsed claims",
            lambda db: rows(
                db,
                f"(SELECT {columns} FROM claims k WHERE k.state = 'held'"
                f" AND k.expires_ms <= {DB_NOW}) UNION ALL (SELECT {columns} FROM claims k"
                f" JOIN session_calls c ON c.session_id = k.session_id"
                f" AND c.call_id = k.call_id WHERE k.state = 'lapsed' AND c.state = 'deferred')"
                f" LIMIT %s",
                (limit,),
            ),
        )
        return [claim_from_row(row) for row in found]

    def settle_lapsed(self, token: str, state: Literal["released", "lapsed"]) -> bool:
        """Move a held claim whose lease has lapsed to `state`; True if it is now in
        `state` (also when it already was), False when it was renewed or finished."""
        row = self._db.statement(
            f"settling claim {token}",
            lambda db: one(
                db,
                f"UPDATE claims SET state = %(state)s WHERE token = %(token)s"
                f" AND ((state = 'held' AND expires_ms <= {DB_NOW}) OR state = %(state)s)"
                f" RETURNING token",
                {"state": state, "token": token},
            ),
            writes=True,
        )
        return row is not None

    def reopen_claims(self, session_id: str, call_id: str) -> None:
        self._db.statement(
            f"reopening the claim of call {call_id} of session {session_id}",
            lambda db: db.execute(
                "UPDATE claims SET state = 'released' WHERE session_id = %s AND call_id = %s"
                " AND state = 'lapsed'",
                (session_id, call_id),
            ),
            writes=True,
        )


def _call(session_id: str, document: str) -> TrackedCall:
    try:
        return TrackedCall.model_validate_json(document)
    except ValidationError as exc:
        raise StoreError(f"cannot read a call of session {session_id}: {exc}") from None


__all__ = ["CallClaims"]
