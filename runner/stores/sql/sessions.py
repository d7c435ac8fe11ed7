"""Sessions in a database, the half both engines share.

A session is a header row (`sessions`: the session without its turns and calls, its
version and turn count), append-only `session_turns` rows and one `session_calls` row per
call. A checkpoint (`save`) is one transaction: the fences (the engine's `write` checks
them first), then `... WHERE id = ?` on the header and the compare-and-set on its
version (a stale writer changes nothing and gets VersionConflict), then only the turns
and calls that changed since the session was loaded, the tokens of new calls in the
continuation index, and the write's events, last. `load` reads the header, the last turn
and the calls that can still change, in one snapshot; the settled history is read (once,
in one query each) only when something uses it, such as the LLM's next request.

Each engine says how to write many rows at once, read the calls that can still change
and a call's stored state (its sessions.py), and may announce a session that became due.
"""

from __future__ import annotations

import builtins
import json
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, Generic, Literal, overload

from pydantic import ValidationError

from runner.state import Session, SessionT, SessionTail, TrackedCall, load_document, tail_from
from runner.state.events import derive_events
from runner.stores.base import (
    Continuation,
    FencedSessions,
    Lease,
    SessionNotFound,
    SessionSummary,
    StoreError,
    VersionConflict,
)
from runner.stores.settled import SettledCalls, terminal_ids, with_earlier
from runner.stores.sql.engine import Engine, TxT, one, rows
from runner.stores.sql.events import SqlEventLog
from runner.stores.sql.rows import calls_of, turns_of

#: What `load` reads of a session: its header document, version, the index of the first
#: turn read, the turns' and the calls' documents.
SessionRows = tuple[str, int, int, list[str], list[str]]


class SqlSessions(FencedSessions, Generic[TxT]):
    def __init__(self, engine: Engine[TxT], events: SqlEventLog[TxT], description: str) -> None:
        self._engine, self._events = engine, events
        self.description = description
        #: Per session: ids of calls known to be stored as terminal, so a save rewrites no
        #: settled call (see settled.py).
        self._settled = SettledCalls()
        sql = engine.dialect.sql
        self._put_agent = sql(
            "INSERT INTO agents (hash, document) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING"
        )
        self._insert = sql(
            "INSERT INTO sessions (id, version, status, agent_slug, agent_hash, schema_version,"
            " document, created_ms, updated_ms, due_ms, turn_count)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        self._header = sql("SELECT document, version, turn_count FROM sessions WHERE id = ?")
        self._header_locked = sql(
            "SELECT document, version, turn_count FROM sessions WHERE id = ?{lock}"
        )
        self._stored = sql("SELECT version, turn_count, status FROM sessions WHERE id = ?{lock}")
        self._update = sql(
            "UPDATE sessions SET version = ?, status = ?, document = ?, updated_ms = ?,"
            " due_ms = ?, agent_hash = ?, schema_version = ?, turn_count = ? WHERE id = ?"
        )
        self._turns_from = sql(
            "SELECT document FROM session_turns WHERE session_id = ? AND idx >= ? ORDER BY idx"
        )
        self._turns_before = sql(
            "SELECT document FROM session_turns WHERE session_id = ? AND idx < ? ORDER BY idx"
        )
        self._all_calls = sql(
            "SELECT document FROM session_calls WHERE session_id = ? ORDER BY {order}"
        )
        self._settled_before = sql(
            "SELECT document FROM session_calls WHERE session_id = ? AND turn < ? AND NOT open"
            " ORDER BY {order}"
        )
        self._agent = sql("SELECT document FROM agents WHERE hash = ?")
        summary = "SELECT id, status, agent_slug, version, updated_ms FROM sessions"
        self._list_all = sql(f"{summary} ORDER BY updated_ms, {{order}}")
        self._list_status = sql(f"{summary} WHERE status = ? ORDER BY updated_ms, {{order}}")
        self._find = sql("SELECT session_id, call_id FROM continuations WHERE token = ?")

    # --- what each engine says --------------------------------------------------------

    @abstractmethod
    def _write_rows(
        self,
        tx: TxT,
        session: SessionTail,
        first: int,
        calls: builtins.list[TrackedCall],
        *,
        stored_turns: int = 0,
        new: builtins.list[TrackedCall] | None = None,
    ) -> None:
        """Inside the transaction: the turns from index `first` on, `calls`, and the
        tokens of the `new` ones (default: all); `stored_turns` were stored before (a
        turn count that shrank, never by the scheduler, must leave no stale rows)."""

    @abstractmethod
    def _recent_calls(self, tx: TxT, session_id: str, turn_count: int) -> builtins.list[str]:
        """The documents of the calls that can still change: open ones and those of the
        last LLM turn, in insertion order."""

    @abstractmethod
    def _stored_states(
        self, tx: TxT, session_id: str, calls: builtins.list[TrackedCall]
    ) -> dict[str, str]:
        """Inside the transaction: the stored state of each of `calls` that is stored."""

    def _announce_due(self, tx: TxT, session: SessionTail) -> None:
        """Inside the transaction that wrote `session` unfenced: notify idle session workers if it
        is due (an engine that can)."""

    # --- the contract -------------------------------------------------------------------

    def create(self, session: Session, agent_document: dict[str, Any]) -> Session:
        session.require_history("creating a session")
        stored = session.model_copy(update={"version": session.version or 1}, deep=True)
        events = derive_events(stored, stored.calls.values(), None, {})
        agent = json.dumps(agent_document, sort_keys=True)

        def work(tx: TxT) -> None:
            tx.execute(self._put_agent, (session.agent_hash, agent))
            try:
                tx.execute(self._insert, (
                    stored.id, stored.version, stored.status, stored.agent_slug,
                    stored.agent_hash, stored.schema_version, stored.header_json(),
                    stored.created_ms, stored.updated_ms, stored.due_ms(),
                    len(stored.turns)))  # fmt: skip
            except self._engine.unique_violation:
                raise StoreError(f"session {session.id} already exists") from None
            self._write_rows(tx, stored, 0, builtins.list(stored.calls.values()))
            self._announce_due(tx, stored)
            self._events.append(tx, stored.id, events, self._engine.stamp())

        self._engine.write(f"creating session {session.id}", work)
        self._events.committed(events)
        self._settled.remember(stored.id, terminal_ids(stored.calls.values()))
        return stored

    def put_agent(self, agent_hash: str, agent_document: dict[str, Any]) -> None:
        values = (agent_hash, json.dumps(agent_document, sort_keys=True))
        self._engine.change(
            "storing an agent definition", lambda tx: tx.execute(self._put_agent, values)
        )

    @overload
    def load(self, session_id: str, *, history: Literal[True] = True) -> Session: ...

    @overload
    def load(self, session_id: str, *, history: bool) -> SessionTail: ...

    def load(self, session_id: str, *, history: bool = True) -> SessionTail:
        """The header, then the whole history, or (history=False) only the last turn and
        the calls that can still change: open ones and those of the last LLM turn."""
        rows_read = self._engine.snapshot(
            f"loading session {session_id}",
            lambda tx: self.read_in(tx, session_id, history=history),
        )
        return self.decode(session_id, rows_read)

    def read_in(
        self, tx: TxT, session_id: str, *, history: bool, lock: bool = False
    ) -> SessionRows:
        """Inside a snapshot or transaction: the rows `load` reads (SessionNotFound when
        there is none). `lock`: in a write transaction, lock the header row as a save
        does first, so no save of the session commits between these reads."""
        row = one(tx, self._header_locked if lock else self._header, (session_id,))
        if row is None:
            raise SessionNotFound(session_id)
        header, version, turn_count = row
        first = 0 if history else max(turn_count - 1, 0)
        turns = [r[0] for r in rows(tx, self._turns_from, (session_id, first))]
        if history:
            calls = [r[0] for r in rows(tx, self._all_calls, (session_id,))]
        else:
            calls = self._recent_calls(tx, session_id, turn_count)
        return header, version, first, turns, calls

    def decode(self, session_id: str, read: SessionRows) -> SessionTail:
        """The session `read_in` read."""
        header, version, first, turn_rows, call_rows = read
        try:
            session = load_document(header)
            turns, calls = turns_of(turn_rows), calls_of(call_rows)
        except (ValueError, ValidationError) as exc:
            raise StoreError(f"cannot read session {session_id}: {exc}") from None
        tail = tail_from(session, first, version=version, turns=turns, calls=calls)
        self._settled.remember(session_id, terminal_ids(tail.calls.values()))
        return tail

    def with_history(self, tail: SessionTail) -> Session:
        """Prepend the turns before `tail.first_turn` and the calls that ended before
        them. Both never change, so they can be read at any later version."""
        if tail.has_history:
            return tail.require_history("with_history")

        def work(tx: TxT) -> tuple[builtins.list[str], builtins.list[str]]:
            turns = rows(tx, self._turns_before, (tail.id, tail.first_turn))
            calls = rows(tx, self._settled_before, (tail.id, tail.first_turn - 1))
            return [r[0] for r in turns], [r[0] for r in calls]

        turn_rows, call_rows = self._engine.snapshot(f"loading the history of {tail.id}", work)
        try:
            earlier, settled = turns_of(turn_rows), calls_of(call_rows)
        except (ValueError, ValidationError) as exc:
            raise StoreError(f"cannot read the history of session {tail.id}: {exc}") from None
        if len(earlier) != tail.first_turn:
            raise StoreError(f"session {tail.id}: {len(earlier)} of its first"
                             f" {tail.first_turn} turns are stored")  # fmt: skip
        self._settled.remember(tail.id, settled.keys())
        return with_earlier(tail, earlier, settled)

    def save(self, session: SessionT, fences: tuple[Lease, ...] = ()) -> SessionT:
        """One transaction: the fences, the compare-and-set on the header, the new rows."""
        return self.save_with(session, fences)

    def save_with(
        self,
        session: SessionT,
        fences: tuple[Lease, ...],
        then: Callable[[TxT], None] | None = None,
        what: str | None = None,
    ) -> SessionT:
        """`save`, running `then` in its transaction after the session's rows (before
        the events, which come last)."""
        stored = session.model_copy(update={"version": session.version + 1,
                                            "updated_ms": self._engine.stamp()})  # fmt: skip
        calls = self._settled.unsettled(session)

        def work(tx: TxT) -> builtins.list[Any]:
            row = one(tx, self._stored, (session.id,))
            if row is None:
                raise SessionNotFound(session.id)
            if row[0] != session.version:
                raise VersionConflict(session.id, session.version, row[0])
            states = self._stored_states(tx, session.id, calls)
            tx.execute(self._update, (
                stored.version, stored.status, stored.header_json(), stored.updated_ms,
                stored.due_ms(), stored.agent_hash, stored.schema_version, stored.turn_count,
                session.id))  # fmt: skip
            # The last stored turn may have been replaced (a partial turn folds).
            first = max(row[1] - 1, stored.first_turn)
            new = [c for c in calls if c.id not in states]
            self._write_rows(tx, stored, first, calls, stored_turns=row[1], new=new)
            if not fences:  # a holder's release announces its session (release_lease)
                self._announce_due(tx, stored)
            if then is not None:
                then(tx)
            events = derive_events(stored, calls, row[2], states)
            self._events.append(tx, session.id, events, stored.updated_ms)  # last: it may lock
            return events

        events = self._engine.write(what or f"saving session {session.id}", work, fences=fences)
        self._events.committed(events)
        self._settled.remember(stored.id, terminal_ids(calls))
        return stored

    def agent_document(self, agent_hash: str) -> dict[str, Any]:
        row = self._engine.read(
            "reading an agent definition", lambda tx: one(tx, self._agent, (agent_hash,))
        )
        if row is None:
            raise StoreError(f"no agent definition with hash {agent_hash[:12]} in this store")
        document: dict[str, Any] = json.loads(row[0])
        return document

    def list(self, status: str | None = None) -> builtins.list[SessionSummary]:
        query, parameters = (self._list_status, (status,)) if status else (self._list_all, ())
        found = self._engine.read("listing sessions", lambda tx: rows(tx, query, parameters))
        return [SessionSummary(*row) for row in found]

    def find(self, token: str) -> Continuation | None:
        return self._engine.read("finding a continuation", lambda tx: self.find_in(tx, token))

    def find_in(self, tx: TxT, token: str) -> Continuation | None:
        """Inside a snapshot or transaction: `find`."""
        row = one(tx, self._find, (token,))
        return Continuation(token, row[0], row[1]) if row else None
