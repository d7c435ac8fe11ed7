"""SQLiteStore's deferred-call claims: how claimable calls are picked (runner.stores.sql
.call_claims has the rest). One `BEGIN IMMEDIATE` transaction on the sessions
connection: SQLite's single writer is what keeps two claimers from taking one call.
Claimable calls are found through the partial index on deferred calls
(`session_calls_deferred`), so the cost follows the deferred calls of the tools asked
for, not every open call.
"""

from __future__ import annotations

import sqlite3
import uuid

from runner.stores.base import Claim
from runner.stores.sql.call_claims import REPLACE_CLAIM, SqlCallClaims
from runner.stores.sql.dialect import ACTIVE_STATUSES
from runner.stores.sql.rows import claimed_call


class SQLiteCallClaims(SqlCallClaims[sqlite3.Connection]):
    def _pick_and_claim(
        self, names: list[str], claimer: str, lease_ms: int, limit: int
    ) -> list[Claim]:
        marks = ", ".join("?" * len(names))
        now_ms = self._engine.dialect.now_ms

        def work(db: sqlite3.Connection) -> list[Claim]:
            claims: list[Claim] = []
            now: int = db.execute(f"SELECT {now_ms}").fetchone()[0]
            found = db.execute(
                f"SELECT c.session_id, c.call_id, c.tool, c.document FROM session_calls c"
                f" JOIN sessions s ON s.id = c.session_id"
                f" LEFT JOIN claims k ON k.session_id = c.session_id AND k.call_id = c.call_id"
                f" WHERE c.state = 'deferred' AND c.tool IN ({marks})"
                f" AND s.status IN {ACTIVE_STATUSES}"
                f" AND (k.state IS NULL OR k.state = 'released')"
                f" AND coalesce(json_extract(c.document, '$.expires_ms') > ?, 1)"
                f" ORDER BY c.rowid LIMIT ?",
                (*names, now, limit),
            ).fetchall()
            for session_id, call_id, tool, document in found:
                call = claimed_call(session_id, document)
                claim = Claim(f"{uuid.uuid4()}", session_id, call_id, tool, claimer, "held",
                              now + lease_ms, lease_ms, call.token, call)  # fmt: skip
                db.execute(
                    "INSERT INTO claims (session_id, call_id, token, tool, worker, state,"
                    " claimed_ms, expires_ms, lease_ms, continuation)"
                    f" VALUES (?, ?, ?, ?, ?, 'held', ?, ?, ?, ?) {REPLACE_CLAIM}",
                    (session_id, call_id, claim.token, tool, claimer, now, claim.expires_ms,
                     lease_ms, call.token),
                )  # fmt: skip
                claims.append(claim)
            return claims

        return self._engine.write(f"claiming calls of {', '.join(names)}", work)
