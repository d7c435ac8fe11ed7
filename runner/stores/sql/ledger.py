"""The effect ledger and late results, the same SQL on both engines.

A ledger row is written before an isolated call's worker starts and again with its
outcome; with fences, only while they are the newest (a holder that lost its lease must
not overwrite what its successor recorded). Both writes are transactions applied once:
the fence check needs one, and a late result is an insert."""

from __future__ import annotations

from typing import Any

from runner.state import ToolResult
from runner.stores.base import Effect, EffectLedger, Lease
from runner.stores.sql.engine import Engine, Transaction, one, rows


class SqlEffectLedger(EffectLedger):
    def __init__(self, engine: Engine[Any]) -> None:
        self._engine = engine
        sql = engine.dialect.sql
        self._effect = sql(
            "SELECT idempotency_key, session_id, call_id, attempt, effects, state, result"
            " FROM effects WHERE idempotency_key = ?"
        )
        self._record = sql(
            "INSERT INTO effects (idempotency_key, session_id, call_id, attempt, effects,"
            " state, result, requested_ms, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (idempotency_key) DO UPDATE SET attempt = excluded.attempt,"
            " effects = excluded.effects, state = excluded.state, result = excluded.result,"
            " updated_ms = excluded.updated_ms"
        )
        self._late = sql(
            "INSERT INTO late_results (token, session_id, call_id, result, received_ms)"
            " VALUES (?, ?, ?, ?, ?)"
        )
        self._lates = sql(
            "SELECT call_id, result FROM late_results WHERE session_id = ?"
            " ORDER BY received_ms, {order}"
        )

    def effect(self, idempotency_key: str) -> Effect | None:
        row = self._engine.read(
            "reading the effect ledger", lambda tx: one(tx, self._effect, (idempotency_key,))
        )
        return Effect(*row) if row else None

    def record_effect(self, effect: Effect, fences: tuple[Lease, ...] = ()) -> None:
        now = self._engine.stamp()

        def work(tx: Transaction) -> None:
            tx.execute(self._record, (effect.idempotency_key, effect.session_id, effect.call_id,
                                      effect.attempt, effect.effects, effect.state,
                                      effect.result, now, now))  # fmt: skip

        self._engine.write(f"recording effect {effect.idempotency_key}", work, fences=fences)

    def record_late(self, token: str, session_id: str, call_id: str, result: ToolResult) -> None:
        def work(tx: Transaction) -> None:
            tx.execute(self._late, (token, session_id, call_id, result.model_dump_json(),
                                    self._engine.stamp()))  # fmt: skip

        self._engine.write(f"recording a late result for {session_id}", work)

    def late_results(self, session_id: str) -> list[tuple[str, ToolResult]]:
        found = self._engine.read(
            "reading late results", lambda tx: rows(tx, self._lates, (session_id,))
        )
        return [(r[0], ToolResult.model_validate_json(r[1])) for r in found]
