"""PostgresStore's sessions: what PostgreSQL does its own way (runner.stores.sql.sessions
has the rest). Many rows are one statement each (arrays through unnest, not a row at a
time), and a session saved due without a fence is announced on `agents_runner_due`
(delivered at commit, so never for a write that failed)."""

from __future__ import annotations

from runner.state import TERMINAL_STATES, SessionTail, TrackedCall
from runner.stores.postgres.connections import Connection
from runner.stores.postgres.leases import DUE_CHANNEL
from runner.stores.sql.engine import rows
from runner.stores.sql.rows import TURN
from runner.stores.sql.sessions import SqlSessions


class PostgresSessions(SqlSessions[Connection]):
    def _write_rows(
        self,
        tx: Connection,
        session: SessionTail,
        first: int,
        calls: list[TrackedCall],
        *,
        stored_turns: int = 0,
        new: list[TrackedCall] | None = None,
    ) -> None:
        turns = session.turns[first - session.first_turn :]
        tx.execute(
            "DELETE FROM session_turns WHERE session_id = %s AND idx >= %s",
            (session.id, first + len(turns)),
        )  # a turn count that shrank (never by the scheduler) leaves no stale rows
        if turns:
            tx.execute(
                "INSERT INTO session_turns (session_id, idx, document)"
                " SELECT %s, i, d FROM unnest(%s::int[], %s::text[]) AS t (i, d)"
                " ON CONFLICT (session_id, idx) DO UPDATE SET document = excluded.document",
                (
                    session.id,
                    [first + i for i in range(len(turns))],
                    [TURN.dump_json(t).decode() for t in turns],
                ),
            )
        if not calls:
            return
        tx.execute(
            "INSERT INTO session_calls (session_id, call_id, turn, open, document, state, tool)"
            " SELECT %s, c, t, o, d, s, l FROM unnest(%s::text[], %s::int[], %s::bool[],"
            " %s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS x (c, t, o, d, s, l, n)"
            " ORDER BY n ON CONFLICT (session_id, call_id) DO UPDATE SET turn = excluded.turn,"
            " open = excluded.open, document = excluded.document, state = excluded.state,"
            " tool = excluded.tool",
            (
                session.id,
                [c.id for c in calls],
                [c.turn for c in calls],
                [c.state not in TERMINAL_STATES for c in calls],
                [c.model_dump_json() for c in calls],
                [c.state for c in calls],
                [c.tool for c in calls],
            ),
        )
        tx.execute(
            "INSERT INTO continuations (token, session_id, call_id)"
            " SELECT k, %s, c FROM unnest(%s::text[], %s::text[]) AS x (k, c)"
            " ON CONFLICT (token) DO NOTHING",
            (session.id, [c.token for c in calls], [c.id for c in calls]),
        )

    def _recent_calls(self, tx: Connection, session_id: str, turn_count: int) -> list[str]:
        found = rows(
            tx,
            "SELECT document FROM session_calls WHERE session_id = %s"
            " AND (open OR turn >= %s) ORDER BY seq",
            (session_id, turn_count - 2),
        )
        return [r[0] for r in found]

    def _stored_states(
        self, tx: Connection, session_id: str, calls: list[TrackedCall]
    ) -> dict[str, str]:
        if not calls:
            return {}
        found = rows(
            tx,
            "SELECT call_id, document::json->>'state' FROM session_calls"
            " WHERE session_id = %s AND call_id = ANY(%s)",
            (session_id, [c.id for c in calls]),
        )
        return {call_id: state for call_id, state in found}

    def _announce_due(self, tx: Connection, session: SessionTail) -> None:
        if session.due_ms() is not None:
            tx.execute("SELECT pg_notify(%s, %s)", (DUE_CHANNEL, session.id))
