"""SQLiteStore's sessions: what SQLite does its own way (runner.stores.sql.sessions has
the rest). Rows are written with executemany, a call's token only once (it never
changes), and the calls that can still change are found through two indexes (open
calls, and calls by turn) joined on rowid."""

from __future__ import annotations

import json
import sqlite3

from runner.state import TERMINAL_STATES, SessionTail, TrackedCall
from runner.stores.sql.rows import TURN
from runner.stores.sql.sessions import SqlSessions


class SQLiteSessions(SqlSessions[sqlite3.Connection]):
    def _write_rows(
        self,
        tx: sqlite3.Connection,
        session: SessionTail,
        first: int,
        calls: list[TrackedCall],
        *,
        stored_turns: int = 0,
        new: list[TrackedCall] | None = None,
    ) -> None:
        turns = session.turns[first - session.first_turn :]
        if stored_turns > first + len(turns):  # shrank (never by the scheduler): no stale rows
            tx.execute(
                "DELETE FROM session_turns WHERE session_id = ? AND idx >= ?",
                (session.id, first + len(turns)),
            )
        tx.executemany(
            "INSERT OR REPLACE INTO session_turns VALUES (?, ?, ?)",
            [(session.id, first + i, TURN.dump_json(t).decode()) for i, t in enumerate(turns)],
        )
        tx.executemany(
            "INSERT INTO session_calls (session_id, call_id, turn, open, document, state, tool)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, call_id)"
            " DO UPDATE SET turn = excluded.turn, open = excluded.open,"
            " document = excluded.document, state = excluded.state, tool = excluded.tool",
            [(session.id, c.id, c.turn, c.state not in TERMINAL_STATES, c.model_dump_json(),
              c.state, c.tool) for c in calls],
        )  # fmt: skip
        tx.executemany(  # a call's token never changes: only a new call adds one
            "INSERT OR IGNORE INTO continuations VALUES (?, ?, ?)",
            [(call.token, session.id, call.id) for call in (calls if new is None else new)],
        )

    def _recent_calls(self, tx: sqlite3.Connection, session_id: str, turn_count: int) -> list[str]:
        found = tx.execute(
            "SELECT document FROM session_calls WHERE rowid IN (SELECT rowid"
            " FROM session_calls WHERE session_id = ? AND open UNION ALL SELECT"
            " rowid FROM session_calls WHERE session_id = ? AND turn >= ?)"
            " ORDER BY rowid",
            (session_id, session_id, turn_count - 2),
        )
        return [r[0] for r in found]

    def _stored_states(
        self, tx: sqlite3.Connection, session_id: str, calls: list[TrackedCall]
    ) -> dict[str, str]:
        if not calls:
            return {}
        return dict(tx.execute(
            "SELECT call_id, state FROM session_calls"
            " WHERE session_id = ? AND call_id IN (SELECT value FROM json_each(?))",
            (session_id, json.dumps([c.id for c in calls]))).fetchall())  # fmt: skip
