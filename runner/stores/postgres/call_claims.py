"""PostgresStore's deferred-call claims: how claimable calls are picked, with many
claimers on many hosts at once (runner.stores.sql.call_claims has the rest).

`claim_calls` is one statement that locks the calls it picks `FOR UPDATE SKIP LOCKED`
(concurrent claimers never wait for each other and pass over what another is taking),
and writes the claims with an upsert that only replaces a `released` row, so a claimer
whose snapshot predates another's commit cannot take the call a second time.
"""

from __future__ import annotations

from runner.stores.base import Claim
from runner.stores.postgres.connections import Connection
from runner.stores.sql.call_claims import REPLACE_CLAIM, SqlCallClaims
from runner.stores.sql.dialect import ACTIVE_STATUSES
from runner.stores.sql.engine import Engine, rows
from runner.stores.sql.rows import CLAIM_COLUMNS, claim_columns, claim_from_row, claimed_call


class PostgresCallClaims(SqlCallClaims[Connection]):
    def __init__(self, engine: Engine[Connection]) -> None:
        super().__init__(engine)
        self._pick = f"""
            WITH clock AS (SELECT {engine.dialect.now_ms} AS ms),
            picked AS (
                SELECT c.session_id, c.call_id, c.tool, c.document, c.seq
                FROM session_calls c JOIN sessions s ON s.id = c.session_id
                LEFT JOIN claims k ON k.session_id = c.session_id AND k.call_id = c.call_id
                CROSS JOIN clock
                WHERE c.state = 'deferred' AND c.tool = ANY(%(tools)s)
                  AND s.status IN {ACTIVE_STATUSES}
                  AND (k.state IS NULL OR k.state = 'released')
                  AND coalesce((c.document::jsonb ->> 'expires_ms')::bigint > clock.ms, true)
                ORDER BY c.seq LIMIT %(limit)s
                FOR UPDATE OF c SKIP LOCKED),
            claimed AS (
                INSERT INTO claims AS k (session_id, call_id, token, tool, worker, state,
                                         claimed_ms, expires_ms, lease_ms, continuation)
                SELECT p.session_id, p.call_id, gen_random_uuid()::text, p.tool,
                       %(claimer)s, 'held', clock.ms, clock.ms + %(lease)s, %(lease)s,
                       p.document::jsonb ->> 'token'
                FROM picked p CROSS JOIN clock
                {REPLACE_CLAIM}
                WHERE k.state = 'released'
                RETURNING {CLAIM_COLUMNS})
            SELECT {claim_columns("c")}, p.document
            FROM claimed c JOIN picked p
              ON p.session_id = c.session_id AND p.call_id = c.call_id
            ORDER BY p.seq"""

    def _pick_and_claim(
        self, names: list[str], claimer: str, lease_ms: int, limit: int
    ) -> list[Claim]:
        values = {"tools": names, "limit": limit, "claimer": claimer, "lease": lease_ms}
        # One transaction: applied once (see connections), tokens made by the database.
        claimed = self._engine.write(
            f"claiming calls of {', '.join(names)}", lambda db: rows(db, self._pick, values)
        )
        return [claim_from_row(row[:9], claimed_call(row[1], row[9])) for row in claimed]
