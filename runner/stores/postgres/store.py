"""PostgresStore: SQLiteStore's tables and semantics on a PostgreSQL server shared by many
hosts. See the package docstring for what differs and why."""

from __future__ import annotations

import builtins
import json
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.errors
from pydantic import ValidationError

from runner.state import TERMINAL_STATES, Session, ToolResult, TrackedCall, load_document
from runner.state.events import derive_events
from runner.stores.base import (
    Continuation,
    DurableStore,
    Effect,
    FencedOut,
    Lease,
    SessionNotFound,
    SessionSummary,
    StoreError,
    VersionConflict,
    cache_key,
)
from runner.stores.postgres.audit import PostgresAudit
from runner.stores.postgres.call_claims import CallClaims
from runner.stores.postgres.claims import DUE_CHANNEL, Claims
from runner.stores.postgres.connections import Connection, Database, one, rows
from runner.stores.postgres.events import EVENTS_CHANNEL, EventLog, Listener
from runner.stores.postgres.schema import migrate
from runner.stores.settled import SettledCalls, terminal_ids, with_earlier
from runner.stores.sqlite import CALL_LIST, TURN, TURN_LIST

logger = logging.getLogger(__name__)


class PostgresStore(CallClaims, Claims, EventLog, PostgresAudit, DurableStore):
    """Sessions, leases, the effect ledger, continuations and the tool cache in one
    PostgreSQL database, for any number of processes on any number of hosts.

    Data calls use a pool of up to `max_connections`; leases a pool of their own (two
    connections, a short lock timeout) so a renewal never waits behind data calls;
    `wait_for_due` and `wait_for_events` a dedicated LISTEN connection each. Any thread
    may call any method.
    """

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = 8,
        retry_budget_s: float = 30.0,
        lease_retry_budget_s: float = 2.0,
        lease_lock_timeout_s: float = 2.0,
        connect_timeout_s: float = 10.0,
        offer_s: float = 2.0,
    ) -> None:
        self._db = Database(
            url,
            max_connections=max_connections,
            budget_s=retry_budget_s,
            lease_budget_s=lease_retry_budget_s,
            lease_lock_timeout_s=lease_lock_timeout_s,
            connect_timeout_s=connect_timeout_s,
        )
        self.description = f"PostgreSQL store {self._db.where}"
        #: Who `due_sessions` offers sessions to: this instance (see there).
        self._instance = f"{uuid.uuid4()}"
        self._offer_ms = int(offer_s * 1000)
        self._settled = SettledCalls()
        self._due_listener = Listener(self._db, DUE_CHANNEL, self.description)
        self._event_listener = Listener(self._db, EVENTS_CHANNEL, self.description)
        try:
            with self._db.connect() as conn:
                self._version = migrate(conn, self.description)
            self._db.open_pools()
            self.now_ms()  # measures this host's clock against the database's
        except psycopg.Error as exc:
            self._db.close()
            raise StoreError(f"cannot prepare {self.description}: {self._db.scrub(exc)}") from None
        except BaseException:
            self._db.close()
            raise

    def close(self) -> None:
        self._due_listener.close()
        self._event_listener.close()
        self._db.close()

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A pooled connection (autocommit), for inspection from tests and tools; the
        store's own methods never share it while it is out."""
        with self._db.data.connection() as conn:
            yield conn

    def schema_version(self) -> int:
        row = self._db.statement(
            "reading the schema version",
            lambda db: one(db, "SELECT MAX(version) FROM schema_migrations"),
        )
        return int(row[0]) if row else 0

    # --- sessions ----------------------------------------------------------------------

    def create(self, session: Session, agent_document: dict[str, Any]) -> Session:
        session.require_history("creating a session")
        stored = session.model_copy(update={"version": session.version or 1}, deep=True)
        events = derive_events(stored, stored.calls.values(), None, {})

        def work(db: Connection) -> None:
            self._put_agent(db, session.agent_hash, agent_document)
            try:
                db.execute(
                    "INSERT INTO sessions (id, version, status, agent_slug, agent_hash,"
                    " schema_version, document, created_ms, updated_ms, due_ms, turn_count)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        stored.id,
                        stored.version,
                        stored.status,
                        stored.agent_slug,
                        stored.agent_hash,
                        stored.schema_version,
                        stored.header_json(),
                        stored.created_ms,
                        stored.updated_ms,
                        stored.due_ms(),
                        len(stored.turns),
                    ),
                )
            except psycopg.errors.UniqueViolation:
                raise StoreError(f"session {session.id} already exists") from None
            self._writerows(db, stored, 0, list(stored.calls.values()))
            self._notify_if_due(db, stored)
            self._write_events(db, stored.id, events, self._stamp())

        self._db.write(f"creating session {session.id}", work)
        self._settled.remember(stored.id, terminal_ids(stored.calls.values()))
        return stored

    def put_agent(self, agent_hash: str, agent_document: dict[str, Any]) -> None:
        self._db.statement(
            "storing an agent definition",
            lambda db: self._put_agent(db, agent_hash, agent_document),
            writes=True,
        )

    def _put_agent(self, db: Connection, agent_hash: str, document: dict[str, Any]) -> None:
        db.execute(
            "INSERT INTO agents VALUES (%s, %s) ON CONFLICT (hash) DO NOTHING",
            (agent_hash, json.dumps(document, sort_keys=True)),
        )

    def load(self, session_id: str, *, history: bool = True) -> Session:
        """The header, then the whole history, or (history=False) only the last turn and
        the calls that can still change: open ones and those of the last LLM turn."""

        def work(db: Connection) -> tuple[str, int, int, list[str], list[str]]:
            row = one(
                db,
                "SELECT document, version, turn_count FROM sessions WHERE id = %s",
                (session_id,),
            )
            if row is None:
                raise SessionNotFound(session_id)
            header, version, turn_count = row
            first = 0 if history else max(turn_count - 1, 0)
            turns = rows(
                db,
                "SELECT document FROM session_turns WHERE session_id = %s"
                " AND idx >= %s ORDER BY idx",
                (session_id, first),
            )
            if history:
                calls = rows(
                    db,
                    "SELECT document FROM session_calls WHERE session_id = %s ORDER BY seq",
                    (session_id,),
                )
            else:
                calls = rows(
                    db,
                    "SELECT document FROM session_calls WHERE session_id = %s"
                    " AND (open OR turn >= %s) ORDER BY seq",
                    (session_id, turn_count - 2),
                )
            return header, version, first, [r[0] for r in turns], [r[0] for r in calls]

        header, version, first, turn_rows, call_rows = self._db.snapshot(
            f"loading session {session_id}", work
        )
        try:
            session = load_document(header)
            turns = TURN_LIST.validate_json("[" + ",".join(turn_rows) + "]")
            calls = {c.id: c for c in CALL_LIST.validate_json("[" + ",".join(call_rows) + "]")}
        except (ValueError, ValidationError) as exc:
            raise StoreError(f"cannot read session {session_id}: {exc}") from None
        session = session.model_copy(
            update={"version": version, "first_turn": first, "turns": turns, "calls": calls}
        )
        self._settled.remember(session_id, terminal_ids(session.calls.values()))
        return session

    def with_history(self, session: Session) -> Session:
        """Prepend the turns before `session.first_turn` and the calls that ended before
        them. Both never change, so they can be read at any later version."""
        if session.has_history:
            return session

        def work(db: Connection) -> tuple[list[str], list[str]]:
            turns = rows(
                db,
                "SELECT document FROM session_turns WHERE session_id = %s"
                " AND idx < %s ORDER BY idx",
                (session.id, session.first_turn),
            )
            calls = rows(
                db,
                "SELECT document FROM session_calls WHERE session_id = %s"
                " AND turn < %s AND NOT open ORDER BY seq",
                (session.id, session.first_turn - 1),
            )
            return [r[0] for r in turns], [r[0] for r in calls]

        turn_rows, call_rows = self._db.snapshot(f"loading the history of {session.id}", work)
        try:
            earlier = TURN_LIST.validate_json("[" + ",".join(turn_rows) + "]")
            settled = {c.id: c for c in CALL_LIST.validate_json("[" + ",".join(call_rows) + "]")}
        except (ValueError, ValidationError) as exc:
            raise StoreError(f"cannot read the history of session {session.id}: {exc}") from None
        if len(earlier) != session.first_turn:
            raise StoreError(
                f"session {session.id}: {len(earlier)} of its first"
                f" {session.first_turn} turns are stored"
            )
        self._settled.remember(session.id, settled.keys())
        return with_earlier(session, earlier, settled)

    def save(self, session: Session, fences: tuple[Lease, ...] = ()) -> Session:
        """One transaction: the fences, the compare-and-set on the header, the new rows."""
        stored = session.model_copy(
            update={"version": session.version + 1, "updated_ms": self._stamp()}
        )
        calls = self._settled.unsettled(session)

        def work(db: Connection) -> None:
            self._check_fences(db, fences)
            row = one(
                db,
                "SELECT version, turn_count, status FROM sessions WHERE id = %s FOR UPDATE",
                (session.id,),
            )
            if row is None:
                raise SessionNotFound(session.id)
            if row[0] != session.version:
                raise VersionConflict(session.id, session.version, row[0])
            before = self._stored_states(db, session.id, calls)
            db.execute(
                "UPDATE sessions SET version = %s, status = %s, document = %s, updated_ms = %s,"
                " due_ms = %s, agent_hash = %s, schema_version = %s, turn_count = %s"
                " WHERE id = %s",
                (
                    stored.version,
                    stored.status,
                    stored.header_json(),
                    stored.updated_ms,
                    stored.due_ms(),
                    stored.agent_hash,
                    stored.schema_version,
                    stored.turn_count,
                    session.id,
                ),
            )
            # The last stored turn may have been replaced (a partial turn folds).
            self._writerows(db, stored, max(row[1] - 1, stored.first_turn), calls)
            if not fences:  # a holder's release announces its session (release_lease)
                self._notify_if_due(db, stored)
            events = derive_events(stored, calls, row[2], before)
            self._write_events(db, session.id, events, stored.updated_ms)  # last: it locks

        self._db.write(f"saving session {session.id}", work)
        self._settled.remember(stored.id, terminal_ids(calls))
        return stored

    def _writerows(
        self, db: Connection, session: Session, first: int, calls: builtins.list[TrackedCall]
    ) -> None:
        """Inside the transaction: the turns from index `first` on, `calls`, their tokens;
        one statement each (arrays, not a row at a time)."""
        turns = session.turns[first - session.first_turn :]
        db.execute(
            "DELETE FROM session_turns WHERE session_id = %s AND idx >= %s",
            (session.id, first + len(turns)),
        )  # a turn count that shrank (never by the scheduler) leaves no stale rows
        if turns:
            db.execute(
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
        db.execute(
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
        db.execute(
            "INSERT INTO continuations (token, session_id, call_id)"
            " SELECT k, %s, c FROM unnest(%s::text[], %s::text[]) AS x (k, c)"
            " ON CONFLICT (token) DO NOTHING",
            (session.id, [c.token for c in calls], [c.id for c in calls]),
        )

    def _notify_if_due(self, db: Connection, session: Session) -> None:
        """Wake idle workers (delivered at commit, so never for a write that failed)."""
        if session.due_ms() is not None:
            db.execute("SELECT pg_notify(%s, %s)", (DUE_CHANNEL, session.id))

    def _check_fences(self, db: Connection, fences: tuple[Lease, ...]) -> None:
        """Inside a write transaction: FencedOut unless each lease's token is the newest.
        FOR SHARE holds off a takeover until this commits, so no newer holder exists
        between the check and the commit (as SQLite's single writer ensures)."""
        if not fences:
            return
        names = sorted({f.name for f in fences})
        held = rows(
            db,
            "SELECT name, fencing_token FROM leases WHERE name = ANY(%s) ORDER BY name FOR SHARE",
            (names,),
        )
        newest = {name: token for name, token in held}
        for fence in fences:
            if newest.get(fence.name) != fence.fencing_token:
                raise FencedOut(fence.name, fence.fencing_token, newest.get(fence.name))

    def agent_document(self, agent_hash: str) -> dict[str, Any]:
        row = self._db.statement(
            "reading an agent definition",
            lambda db: one(db, "SELECT document FROM agents WHERE hash = %s", (agent_hash,)),
        )
        if row is None:
            raise StoreError(f"no agent definition with hash {agent_hash[:12]} in this store")
        document: dict[str, Any] = json.loads(row[0])
        return document

    def list(self, status: str | None = None) -> builtins.list[SessionSummary]:
        query = "SELECT id, status, agent_slug, version, updated_ms FROM sessions"
        query += " WHERE status = %s" if status else ""
        query += " ORDER BY updated_ms, seq"
        found = self._db.statement(
            "listing sessions", lambda db: rows(db, query, (status,) if status else None)
        )
        return [SessionSummary(*row) for row in found]

    # --- the effect ledger -------------------------------------------------------------

    def effect(self, idempotency_key: str) -> Effect | None:
        row = self._db.statement(
            "reading the effect ledger",
            lambda db: one(
                db,
                "SELECT idempotency_key, session_id, call_id, attempt, effects, state, result"
                " FROM effects WHERE idempotency_key = %s",
                (idempotency_key,),
            ),
        )
        return Effect(*row) if row else None

    def record_effect(self, effect: Effect, fences: tuple[Lease, ...] = ()) -> None:
        """Write the call's ledger row; with fences, only while they are the newest (a
        holder that lost its lease must not overwrite what its successor recorded)."""
        now = self._stamp()

        def work(db: Connection) -> None:
            self._check_fences(db, fences)
            db.execute(
                "INSERT INTO effects VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (idempotency_key) DO UPDATE SET attempt = excluded.attempt,"
                " effects = excluded.effects, state = excluded.state, result = excluded.result,"
                " updated_ms = excluded.updated_ms",
                (
                    effect.idempotency_key,
                    effect.session_id,
                    effect.call_id,
                    effect.attempt,
                    effect.effects,
                    effect.state,
                    effect.result,
                    now,
                    now,
                ),
            )

        # An upsert of fixed values: idempotent, but the fence check needs a transaction.
        self._db.write(f"recording effect {effect.idempotency_key}", work)

    # --- late results ------------------------------------------------------------------

    def record_late(self, token: str, session_id: str, call_id: str, result: ToolResult) -> None:
        """Keep a result that came after its call ended (it never revives the call)."""

        def work(db: Connection) -> None:
            db.execute(
                "INSERT INTO late_results (token, session_id, call_id, result, received_ms)"
                " VALUES (%s, %s, %s, %s, %s)",
                (token, session_id, call_id, result.model_dump_json(), self._stamp()),
            )

        self._db.write(f"recording a late result for {session_id}", work)

    def late_results(self, session_id: str) -> builtins.list[tuple[str, ToolResult]]:
        found = self._db.statement(
            "reading late results",
            lambda db: rows(
                db,
                "SELECT call_id, result FROM late_results WHERE session_id = %s"
                " ORDER BY received_ms, seq",
                (session_id,),
            ),
        )
        return [(r[0], ToolResult.model_validate_json(r[1])) for r in found]

    # --- continuations -----------------------------------------------------------------

    def find(self, token: str) -> Continuation | None:
        row = self._db.statement(
            "finding a continuation",
            lambda db: one(
                db, "SELECT session_id, call_id FROM continuations WHERE token = %s", (token,)
            ),
        )
        return Continuation(token, row[0], row[1]) if row else None

    # --- tool cache --------------------------------------------------------------------

    def get(self, tool: str, arguments: dict[str, Any]) -> ToolResult | None:
        row = self._db.statement(
            "reading the tool cache",
            lambda db: one(
                db,
                "SELECT result FROM tool_cache WHERE key = %s"
                " AND (expires_ms IS NULL OR expires_ms > %s)",
                (cache_key(tool, arguments), self._stamp()),
            ),
        )
        return ToolResult.model_validate_json(row[0]) if row else None

    def put(
        self, tool: str, arguments: dict[str, Any], result: ToolResult, ttl_s: float | None
    ) -> None:
        now = self._stamp()
        expires = now + int(ttl_s * 1000) if ttl_s is not None else None
        self._db.statement(
            "writing the tool cache",
            lambda db: db.execute(
                "INSERT INTO tool_cache VALUES (%s, %s, %s, %s, %s) ON CONFLICT (key) DO UPDATE"
                " SET tool = excluded.tool, result = excluded.result,"
                " created_ms = excluded.created_ms, expires_ms = excluded.expires_ms",
                (cache_key(tool, arguments), tool, result.model_dump_json(), now, expires),
            ),
            writes=True,
        )
