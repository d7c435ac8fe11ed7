"""The embedded default store: one SQLite file in WAL mode, every table in this module.

Migrations are numbered and recorded in `schema_migrations`; opening a file applies the
missing ones in one transaction and refuses a file from a newer version of this program.
A session is a header row (`sessions`: the session without its turns and calls, its
version and turn count), append-only `session_turns` rows and one `session_calls` row per
call. A checkpoint (`save`) is one transaction: `UPDATE sessions ... WHERE id = ? AND
version = ?` (a stale writer changes zero rows and gets VersionConflict; with fences, the
transaction first checks that each lease's token is still the newest, FencedOut
otherwise), then only the turns and calls that changed since the session was loaded.
`load` reads the header, the last turn and the calls that can still change; the settled
history is read (once, in one query each) only when something uses it, such as the
LLM's next request. Lease expiry is measured in database time. Continuation tokens are
indexed in their own table, written in the same transaction as the call, so `session
complete TOKEN` is a key lookup, not a scan. The event log (`events`) gets the events of
each create and save (runner.state.events, diffed against the status and call states the
transaction reads before writing) in that same transaction; `seq` is commit order, since
SQLite has one writer. `wait_for_events` wakes on this process's own writes, and polls
for other processes'.
"""

from __future__ import annotations

import builtins
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Collection, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import TypeAdapter, ValidationError

from runner.faults import crash_point
from runner.state import (
    TERMINAL_STATES,
    Session,
    ToolResult,
    TrackedCall,
    Turn,
    load_document,
)
from runner.state.events import NewEvent, derive_events
from runner.stores.base import (
    Continuation,
    DurableStore,
    Effect,
    Event,
    FencedOut,
    Lease,
    SessionNotFound,
    SessionSummary,
    StoreError,
    VersionConflict,
    cache_key,
)
from runner.stores.settled import SettledCalls, terminal_ids, with_earlier
from runner.stores.sqlite_audit import SQLiteAudit
from runner.stores.sqlite_claims import SQLiteClaims

logger = logging.getLogger(__name__)

#: Each entry moves the schema from version N-1 to N. Append only: never edit one.
MIGRATIONS: list[str] = [
    # 1: sessions, the agent definitions they run, continuation tokens, tool cache.
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        status TEXT NOT NULL,
        agent_slug TEXT NOT NULL,
        agent_hash TEXT NOT NULL,
        schema_version INTEGER NOT NULL,
        document TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL
    );
    CREATE INDEX sessions_by_status ON sessions (status, updated_ms);
    CREATE TABLE agents (
        hash TEXT PRIMARY KEY,
        document TEXT NOT NULL
    );
    CREATE TABLE continuations (
        token TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (id),
        call_id TEXT NOT NULL
    );
    CREATE INDEX continuations_by_session ON continuations (session_id);
    CREATE TABLE tool_cache (
        key TEXT PRIMARY KEY,
        tool TEXT NOT NULL,
        result TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        expires_ms INTEGER
    );
    """,
    # 2: durability: leases with fencing tokens, the effect ledger, late results, and
    # `due_ms` (when a worker should next look at a session; NULL: only outside input).
    """
    ALTER TABLE sessions ADD COLUMN due_ms INTEGER;
    CREATE INDEX sessions_by_due ON sessions (due_ms);
    CREATE TABLE leases (
        name TEXT PRIMARY KEY,
        owner TEXT,
        expires_ms INTEGER NOT NULL,
        fencing_token INTEGER NOT NULL,
        takeovers INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE effects (
        idempotency_key TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        effects TEXT NOT NULL,
        state TEXT NOT NULL,
        result TEXT,
        requested_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL
    );
    CREATE TABLE late_results (
        token TEXT NOT NULL,
        session_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        result TEXT NOT NULL,
        received_ms INTEGER NOT NULL
    );
    """,
    # 3: sessions as rows, so that a checkpoint writes only what changed and a resume
    # reads no settled history: the header keeps the rest of the document.
    """
    CREATE TABLE session_turns (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        idx INTEGER NOT NULL,
        document TEXT NOT NULL,
        PRIMARY KEY (session_id, idx)
    ) WITHOUT ROWID;
    CREATE TABLE session_calls (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        call_id TEXT NOT NULL,
        turn INTEGER NOT NULL,
        open INTEGER NOT NULL,
        document TEXT NOT NULL,
        UNIQUE (session_id, call_id)
    );
    CREATE INDEX session_calls_by_turn ON session_calls (session_id, turn);
    CREATE INDEX session_calls_open ON session_calls (session_id) WHERE open;
    INSERT INTO session_turns
        SELECT s.id, t.key, t.value FROM sessions s, json_each(s.document, '$.turns') t;
    INSERT INTO session_calls
        SELECT s.id, c.key, json_extract(c.value, '$.turn'),
               json_extract(c.value, '$.state') NOT IN
                   ('completed', 'failed', 'expired', 'cancelled'),
               c.value
        FROM sessions s, json_each(s.document, '$.calls') c;
    ALTER TABLE sessions ADD COLUMN turn_count INTEGER NOT NULL DEFAULT 0;
    UPDATE sessions SET turn_count = json_array_length(document, '$.turns'),
                        document = json_remove(document, '$.turns', '$.calls');
    """,
    # 4: the operator's `paused` status is now called `frozen` (`session pause` runs a
    # step, as in agents-exe); a failed session (`failed`) is never due.
    """
    UPDATE sessions SET status = 'frozen', document = json_set(document, '$.status', 'frozen')
        WHERE status = 'paused';
    """,
    # 5: the event log behind the server's Server-Sent Events: one row per change of a
    # call's state or a session's status, written in the transaction that made it; `seq`
    # is commit order (SQLite has one writer), what `Last-Event-ID` resumes after.
    """
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        call_id TEXT,
        data TEXT NOT NULL,
        at_ms INTEGER NOT NULL
    );
    CREATE INDEX events_by_session ON events (session_id, seq);
    """,
    # 6: claims: a deferred call handed to an external worker until `expires_ms`. One row
    # per call; a re-claim writes a new `token`, so the old holder's token matches nothing.
    # state: held, released (lapsed, claimable again), lapsed (lapsed with external
    # effects: the call went to unknown_outcome), done (its result was given). `lease_ms`
    # is what a heartbeat renews by; `continuation` the call's continuation token. Calls
    # get their state and tool as columns, so finding claimable calls is an index range.
    """
    CREATE TABLE claims (
        session_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        token TEXT NOT NULL UNIQUE,
        tool TEXT NOT NULL,
        worker TEXT NOT NULL,
        state TEXT NOT NULL,
        claimed_ms INTEGER NOT NULL,
        expires_ms INTEGER NOT NULL,
        lease_ms INTEGER NOT NULL,
        continuation TEXT NOT NULL,
        PRIMARY KEY (session_id, call_id)
    );
    CREATE INDEX claims_by_state ON claims (state, expires_ms);
    ALTER TABLE session_calls ADD COLUMN state TEXT;
    ALTER TABLE session_calls ADD COLUMN tool TEXT;
    UPDATE session_calls SET state = json_extract(document, '$.state'),
                             tool = json_extract(document, '$.tool');
    CREATE INDEX session_calls_deferred ON session_calls (tool) WHERE state = 'deferred';
    """,
    # 7: the audit trail (runner.stores.audit): one row per isolated call, never changed
    # (the triggers refuse it), indexed by time, session, tool and outcome. `record` is
    # the whole record as JSON; the other columns are copies of its fields, for queries.
    """
    CREATE TABLE audit_records (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms INTEGER NOT NULL,
        session_id TEXT,
        call_id TEXT,
        tool TEXT NOT NULL,
        runner TEXT NOT NULL,
        outcome TEXT NOT NULL,
        record TEXT NOT NULL,
        recorded_ms INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5)
                                                         * 86400000) AS INTEGER))
    );
    CREATE INDEX audit_records_by_time ON audit_records (at_ms);
    CREATE INDEX audit_records_by_session ON audit_records (session_id, at_ms);
    CREATE INDEX audit_records_by_tool ON audit_records (tool, at_ms);
    CREATE INDEX audit_records_by_outcome ON audit_records (outcome, at_ms);
    CREATE TRIGGER audit_records_no_update BEFORE UPDATE ON audit_records
    BEGIN SELECT RAISE(ABORT, 'audit_records is append-only'); END;
    CREATE TRIGGER audit_records_no_delete BEFORE DELETE ON audit_records
    BEGIN SELECT RAISE(ABORT, 'audit_records is append-only'); END;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
#: SQLite's `synchronous` settings a store may use (WAL mode: see SQLiteStore).
Synchronous = Literal["NORMAL", "FULL"]
#: Rows are validated when written; reading many at once is one pass of pydantic-core.
TURN_LIST = TypeAdapter(list[Turn])
CALL_LIST = TypeAdapter(list[TrackedCall])
TURN = TypeAdapter(Turn)
#: Database time in epoch milliseconds: one clock for every process sharing the file.
# ROUND, not a bare CAST: the julianday round trip can land a hair below the whole ms.
DB_NOW = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _statements(script: str) -> Iterator[str]:
    """The statements of a migration, one at a time (a trigger's body keeps its `;`s:
    SQLite itself says when a statement is complete)."""
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip() != ";":
                yield pending
            pending = ""
    if pending.strip(" \n;"):
        raise ValueError(f"a migration ends inside a statement: {pending[:80]!r}")


class _Connection:
    """One sqlite3 connection and the lock that gives it to one thread at a time."""

    def __init__(self, path: Path, busy_timeout_s: float, synchronous: Synchronous) -> None:
        # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE below).
        self.db = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None,
                                  check_same_thread=False)  # fmt: skip
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={synchronous}")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.lock = threading.RLock()
        self.commits = 0  # write transactions committed on this connection

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            yield self.db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the write lock up front (no upgrade deadlock)."""
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
                crash_point("store.commit")  # inside the transaction: all or nothing
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
            self.commits += 1

    def close(self) -> None:
        with self.lock:
            self.db.close()


class SQLiteStore(SQLiteClaims, SQLiteAudit, DurableStore):
    """Sessions, leases, the effect ledger, continuations and the tool cache in one file.

    Two connections: one for sessions, the ledger and the cache, one for leases only, so
    that renewing a lease never queues behind this process's other store calls. Each is
    used by one thread at a time; any thread may call any method.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_s: float = 10.0,
        lease_busy_timeout_s: float = 2.0,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        """`synchronous`: SQLite's setting for both connections. NORMAL (in WAL mode) loses
        no commit when this process dies, but may lose the last ones to a power cut or an
        OS crash; FULL syncs the log at every commit, and loses none to those either."""
        if synchronous not in get_args(Synchronous):
            raise ValueError(f"synchronous: expected NORMAL or FULL, got {synchronous!r}")
        self.path = Path(path)
        self.description = f"SQLite store {self.path}"
        #: Per session: ids of calls known to be stored as terminal, so a save rewrites no
        #: settled call. A terminal call never changes again (see runner.state.transitions)
        #: and the store never deletes one, so this only grows. Bounded by session; a miss
        #: only costs rewriting those calls once.
        self._settled = SettledCalls()
        #: Bumped after each commit that wrote events, for `wait_for_events`.
        self._events_written = threading.Condition()
        self._event_generation = self._event_seen = 0
        self._leases: _Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._data = _Connection(self.path, busy_timeout_s, synchronous)
            self._migrate()
            self._leases = _Connection(self.path, lease_busy_timeout_s, synchronous)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the store {self.path}: {exc}") from None

    def close(self) -> None:
        self._data.close()
        if self._leases is not None:
            self._leases.close()

    @property
    def db(self) -> sqlite3.Connection:
        """The sessions connection, for inspection (PRAGMAs, counts) from one thread; the
        store's own methods take its lock, this does not."""
        return self._data.db

    @property
    def commits(self) -> int:
        """Write transactions this store has committed (both connections), for counting
        what an operation costs."""
        return self._data.commits + (self._leases.commits if self._leases is not None else 0)

    @property
    def _lease_db(self) -> _Connection:
        assert self._leases is not None, "opened in __init__"
        return self._leases

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._data.transaction()

    def _migrate(self) -> None:
        with self._transaction() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations"
                " (version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL)"
            )
            current = db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] or 0
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"schema version {current} is newer than this program's {SCHEMA_VERSION};"
                    " upgrade agents-runner"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in _statements(MIGRATIONS[version - 1]):
                    db.execute(statement)
                db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, _now_ms()))

    def schema_version(self) -> int:
        with self._data.reading() as db:
            version: int = db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0]
        return version

    def now_ms(self) -> int:
        """Database time: what leases are measured against."""
        with self._lease_db.reading() as db:
            now: int = db.execute(f"SELECT {DB_NOW}").fetchone()[0]
        return now

    # --- sessions ----------------------------------------------------------------------

    def create(self, session: Session, agent_document: dict[str, Any]) -> Session:
        session.require_history("creating a session")
        stored = session.model_copy(update={"version": session.version or 1}, deep=True)
        events = derive_events(stored, stored.calls.values(), None, {})
        with self._transaction() as db:
            self._put_agent(db, session.agent_hash, agent_document)
            try:
                db.execute(
                    "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (stored.id, stored.version, stored.status, stored.agent_slug, stored.agent_hash,
                     stored.schema_version, stored.header_json(), stored.created_ms,
                     stored.updated_ms, stored.due_ms(), len(stored.turns)),
                )  # fmt: skip
            except sqlite3.IntegrityError:
                raise StoreError(f"session {session.id} already exists") from None
            self._write_rows(db, stored, 0, list(stored.calls.values()))
            self._write_events(db, stored.id, events, _now_ms())
        self._announce(events)
        self._settled.remember(stored.id, terminal_ids(stored.calls.values()))
        return stored

    def put_agent(self, agent_hash: str, agent_document: dict[str, Any]) -> None:
        with self._transaction() as db:
            self._put_agent(db, agent_hash, agent_document)

    def _put_agent(self, db: sqlite3.Connection, agent_hash: str, document: dict[str, Any]) -> None:
        db.execute(
            "INSERT OR IGNORE INTO agents VALUES (?, ?)",
            (agent_hash, json.dumps(document, sort_keys=True)),
        )

    def load(self, session_id: str, *, history: bool = True) -> Session:
        """The header, then the whole history, or (history=False) only the last turn and
        the calls that can still change: open ones and those of the last LLM turn."""
        with self._data.reading() as db:
            row = db.execute(
                "SELECT document, version, turn_count FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            header, version, turn_count = row
            first = 0 if history else max(turn_count - 1, 0)
            try:
                session = load_document(header)
                documents = [r[0] for r in db.execute(
                    "SELECT document FROM session_turns WHERE session_id = ? AND idx >= ?"
                    " ORDER BY idx", (session_id, first))]  # fmt: skip
                turns = TURN_LIST.validate_json("[" + ",".join(documents) + "]")
                if history:
                    calls = self._calls(
                        db, "SELECT document FROM session_calls WHERE session_id = ?"
                        " ORDER BY rowid", (session_id,))  # fmt: skip
                else:
                    calls = self._calls(
                        db, "SELECT document FROM session_calls WHERE rowid IN (SELECT rowid"
                        " FROM session_calls WHERE session_id = ? AND open UNION ALL SELECT"
                        " rowid FROM session_calls WHERE session_id = ? AND turn >= ?)"
                        " ORDER BY rowid", (session_id, session_id, turn_count - 2))  # fmt: skip
            except (ValueError, ValidationError) as exc:
                raise StoreError(f"cannot read session {session_id}: {exc}") from None
        session = session.model_copy(update={
            "version": version, "first_turn": first, "turns": turns, "calls": calls})  # fmt: skip
        self._settled.remember(session_id, terminal_ids(session.calls.values()))
        return session

    def with_history(self, session: Session) -> Session:
        """Prepend the turns before `session.first_turn` and the calls that ended before
        them. Both never change, so they can be read at any later version."""
        if session.has_history:
            return session
        with self._data.reading() as db:
            try:
                documents = [r[0] for r in db.execute(
                    "SELECT document FROM session_turns WHERE session_id = ? AND idx < ?"
                    " ORDER BY idx", (session.id, session.first_turn))]  # fmt: skip
                earlier = TURN_LIST.validate_json("[" + ",".join(documents) + "]")
                settled = self._calls(
                    db,
                    "SELECT document FROM session_calls WHERE session_id = ? AND turn < ?"
                    " AND NOT open ORDER BY rowid",
                    (session.id, session.first_turn - 1),
                )
            except (ValueError, ValidationError) as exc:
                raise StoreError(
                    f"cannot read the history of session {session.id}: {exc}"
                ) from None
        if len(earlier) != session.first_turn:
            raise StoreError(f"session {session.id}: {len(earlier)} of its first"
                             f" {session.first_turn} turns are stored")  # fmt: skip
        self._settled.remember(session.id, settled.keys())
        return with_earlier(session, earlier, settled)

    def _calls(
        self, db: sqlite3.Connection, query: str, parameters: tuple[Any, ...]
    ) -> dict[str, TrackedCall]:
        documents = [r[0] for r in db.execute(query, parameters)]
        calls = CALL_LIST.validate_json("[" + ",".join(documents) + "]")
        return {c.id: c for c in calls}

    def save(self, session: Session, fences: tuple[Lease, ...] = ()) -> Session:
        """One transaction: the compare-and-set on the header, then the new rows."""
        stored = session.model_copy(update={"version": session.version + 1,
                                            "updated_ms": _now_ms()})  # fmt: skip
        calls = self._settled.unsettled(session)
        with self._transaction() as db:
            self._check_fences(db, fences)
            row = db.execute(
                "SELECT version, turn_count, status FROM sessions WHERE id = ?", (session.id,)
            ).fetchone()
            if row is None:
                raise SessionNotFound(session.id)
            if row[0] != session.version:
                raise VersionConflict(session.id, session.version, row[0])
            states = self._stored_states(db, stored.id, calls)
            events = derive_events(stored, calls, row[2], states)
            db.execute(
                "UPDATE sessions SET version = ?, status = ?, document = ?, updated_ms = ?,"
                " due_ms = ?, agent_hash = ?, schema_version = ?, turn_count = ?"
                " WHERE id = ?",
                (stored.version, stored.status, stored.header_json(), stored.updated_ms,
                 stored.due_ms(), stored.agent_hash, stored.schema_version,
                 stored.turn_count, session.id),
            )  # fmt: skip
            # The last stored turn may have been replaced (a partial turn folds).
            new = [c for c in calls if c.id not in states]
            first = max(row[1] - 1, stored.first_turn)
            self._write_rows(db, stored, first, calls, stored_turns=row[1], new=new)
            self._write_events(db, stored.id, events, stored.updated_ms)
        self._announce(events)
        self._settled.remember(stored.id, terminal_ids(calls))
        return stored

    def _write_rows(
        self,
        db: sqlite3.Connection,
        session: Session,
        first: int,
        calls: builtins.list[TrackedCall],
        *,
        stored_turns: int = 0,
        new: builtins.list[TrackedCall] | None = None,
    ) -> None:
        """Inside the transaction: the turns from index `first` on, `calls`, and the
        tokens of the `new` ones (default: all); `stored_turns` were stored before."""
        turns = session.turns[first - session.first_turn :]
        if stored_turns > first + len(turns):  # shrank (never by the scheduler): no stale rows
            db.execute(
                "DELETE FROM session_turns WHERE session_id = ? AND idx >= ?",
                (session.id, first + len(turns)),
            )
        db.executemany(
            "INSERT OR REPLACE INTO session_turns VALUES (?, ?, ?)",
            [(session.id, first + i, TURN.dump_json(t).decode()) for i, t in enumerate(turns)],
        )
        db.executemany(
            "INSERT INTO session_calls (session_id, call_id, turn, open, document, state, tool)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, call_id)"
            " DO UPDATE SET turn = excluded.turn, open = excluded.open,"
            " document = excluded.document, state = excluded.state, tool = excluded.tool",
            [(session.id, c.id, c.turn, c.state not in TERMINAL_STATES, c.model_dump_json(),
              c.state, c.tool) for c in calls],
        )  # fmt: skip
        db.executemany(  # a call's token never changes: only a new call adds one
            "INSERT OR IGNORE INTO continuations VALUES (?, ?, ?)",
            [(call.token, session.id, call.id) for call in (calls if new is None else new)],
        )

    def _stored_states(
        self, db: sqlite3.Connection, session_id: str, calls: builtins.list[TrackedCall]
    ) -> dict[str, str]:
        """Inside the transaction: the stored state of each of `calls` that is stored."""
        if not calls:
            return {}
        return dict(db.execute(
            "SELECT call_id, state FROM session_calls"
            " WHERE session_id = ? AND call_id IN (SELECT value FROM json_each(?))",
            (session_id, json.dumps([c.id for c in calls]))).fetchall())  # fmt: skip

    def _write_events(
        self, db: sqlite3.Connection, session_id: str, events: builtins.list[NewEvent], at_ms: int
    ) -> None:
        if not events:
            return
        db.executemany(
            "INSERT INTO events (session_id, kind, call_id, data, at_ms) VALUES (?, ?, ?, ?, ?)",
            [(session_id, e.kind, e.call_id, json.dumps(e.data), at_ms) for e in events],
        )

    def _announce(self, events: builtins.list[NewEvent]) -> None:
        """After a commit: wake `wait_for_events` if it wrote any."""
        if events:
            with self._events_written:
                self._event_generation += 1
                self._events_written.notify_all()

    def _check_fences(self, db: sqlite3.Connection, fences: tuple[Lease, ...]) -> None:
        """Inside a write transaction: FencedOut unless each lease's token is the newest."""
        for fence in fences:
            newest = self._token(db, fence.name)
            if newest != fence.fencing_token:
                raise FencedOut(fence.name, fence.fencing_token, newest)

    def _one(self, query: str, parameters: tuple[Any, ...] = ()) -> Any:
        with self._data.reading() as db:
            return db.execute(query, parameters).fetchone()

    def _all(self, query: str, parameters: tuple[Any, ...] = ()) -> list[Any]:
        with self._data.reading() as db:
            return db.execute(query, parameters).fetchall()

    def agent_document(self, agent_hash: str) -> dict[str, Any]:
        query = "SELECT document FROM agents WHERE hash = ?"
        row = self._one(query, (agent_hash,))
        if row is None:
            raise StoreError(f"no agent definition with hash {agent_hash[:12]} in this store")
        document: dict[str, Any] = json.loads(row[0])
        return document

    def list(self, status: str | None = None) -> builtins.list[SessionSummary]:
        query = "SELECT id, status, agent_slug, version, updated_ms FROM sessions"
        rows = self._all(
            query + (" WHERE status = ? ORDER BY updated_ms" if status else " ORDER BY updated_ms"),
            (status,) if status else (),
        )
        return [SessionSummary(*row) for row in rows]

    def due_sessions(self, limit: int, exclude: Collection[str] = ()) -> builtins.list[str]:
        """Sessions a worker can advance now: due, and not leased by a live holder."""
        rows = self._all(
            f"SELECT s.id FROM sessions s LEFT JOIN leases l ON l.name = s.id"
            f" WHERE s.due_ms <= {DB_NOW} AND s.status IN ('running', 'waiting')"
            f" AND (l.owner IS NULL OR l.expires_ms <= {DB_NOW})"
            f" ORDER BY s.due_ms LIMIT ?",
            (limit + len(exclude),),
        )
        return [r[0] for r in rows if r[0] not in exclude][:limit]

    # --- the event log -----------------------------------------------------------------

    def events(
        self, after: int, limit: int = 500, session_id: str | None = None
    ) -> builtins.list[Event]:
        columns = "SELECT seq, session_id, kind, call_id, data, at_ms FROM events"
        if session_id is None:
            rows = self._all(f"{columns} WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit))
        else:
            rows = self._all(f"{columns} WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                             (session_id, after, limit))  # fmt: skip
        return [Event(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows]

    def last_event_seq(self) -> int:
        seq: int = self._one("SELECT COALESCE(MAX(seq), 0) FROM events")[0]
        return seq

    def wait_for_events(self, timeout_s: float) -> bool:
        """True as soon as this store has committed events since the last call returned;
        False after `timeout_s` (another process's writes are only found by reading)."""
        with self._events_written:
            woke = self._events_written.wait_for(
                lambda: self._event_generation != self._event_seen, timeout_s
            )
            self._event_seen = self._event_generation
        return woke

    # --- leases ------------------------------------------------------------------------

    def acquire_lease(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        with self._lease_db.transaction() as db:
            now = db.execute(f"SELECT {DB_NOW}").fetchone()[0]
            row = db.execute(
                "SELECT owner, expires_ms, fencing_token, takeovers FROM leases WHERE name = ?",
                (name,),
            ).fetchone()
            held_by, expires, token, takeovers = row or (None, 0, 0, 0)
            if held_by is not None and expires > now:
                return None
            # A lease left behind (never released) means its holder died: count it.
            takeovers = takeovers + 1 if held_by is not None else 0
            lease = Lease(name, owner, token + 1, now + int(ttl_s * 1000), takeovers)
            db.execute(
                "INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?)",
                (name, owner, lease.expires_ms, lease.fencing_token, takeovers),
            )
        return lease

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        with self._lease_db.transaction() as db:
            expires = db.execute(f"SELECT {DB_NOW}").fetchone()[0] + int(ttl_s * 1000)
            changed = db.execute(
                "UPDATE leases SET expires_ms = ? WHERE name = ? AND fencing_token = ?",
                (expires, lease.name, lease.fencing_token),
            ).rowcount
            if changed == 0:
                raise FencedOut(lease.name, lease.fencing_token, self._token(db, lease.name))
        return replace(lease, expires_ms=expires)

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up cleanly (a clean release resets the takeover count)."""
        with self._lease_db.transaction() as db:
            db.execute(
                "UPDATE leases SET owner = NULL, expires_ms = 0, takeovers = 0"
                " WHERE name = ? AND fencing_token = ?",
                (lease.name, lease.fencing_token),
            )

    def lease(self, name: str) -> Lease | None:
        """The lease as stored, if anyone holds or held it (owner '' when released)."""
        with self._lease_db.reading() as db:
            row = db.execute(
                "SELECT owner, fencing_token, expires_ms, takeovers FROM leases WHERE name = ?",
                (name,),
            ).fetchone()
        return Lease(name, row[0] or "", row[1], row[2], row[3]) if row else None

    def _token(self, db: sqlite3.Connection, name: str) -> int | None:
        row = db.execute("SELECT fencing_token FROM leases WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    # --- the effect ledger -------------------------------------------------------------

    def effect(self, idempotency_key: str) -> Effect | None:
        row = self._one(
            "SELECT idempotency_key, session_id, call_id, attempt, effects, state, result"
            " FROM effects WHERE idempotency_key = ?",
            (idempotency_key,),
        )
        return Effect(*row) if row else None

    def record_effect(self, effect: Effect, fences: tuple[Lease, ...] = ()) -> None:
        """Write the call's ledger row; with fences, only while they are the newest (a
        holder that lost its lease must not overwrite what its successor recorded)."""
        now = _now_ms()
        with self._transaction() as db:
            self._check_fences(db, fences)
            db.execute(
                "INSERT INTO effects VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (idempotency_key) DO UPDATE SET attempt = excluded.attempt,"
                " effects = excluded.effects, state = excluded.state, result = excluded.result,"
                " updated_ms = excluded.updated_ms",
                (effect.idempotency_key, effect.session_id, effect.call_id, effect.attempt,
                 effect.effects, effect.state, effect.result, now, now),
            )  # fmt: skip

    # --- late results ------------------------------------------------------------------

    def record_late(self, token: str, session_id: str, call_id: str, result: ToolResult) -> None:
        """Keep a result that came after its call ended (it never revives the call)."""
        with self._transaction() as db:
            db.execute(
                "INSERT INTO late_results VALUES (?, ?, ?, ?, ?)",
                (token, session_id, call_id, result.model_dump_json(), _now_ms()),
            )

    def late_results(self, session_id: str) -> builtins.list[tuple[str, ToolResult]]:
        rows = self._all(
            "SELECT call_id, result FROM late_results WHERE session_id = ? ORDER BY received_ms",
            (session_id,),
        )
        return [(r[0], ToolResult.model_validate_json(r[1])) for r in rows]

    # --- continuations -----------------------------------------------------------------

    def find(self, token: str) -> Continuation | None:
        row = self._one("SELECT session_id, call_id FROM continuations WHERE token = ?", (token,))
        return Continuation(token, row[0], row[1]) if row else None

    # --- tool cache --------------------------------------------------------------------

    def get(self, tool: str, arguments: dict[str, Any]) -> ToolResult | None:
        row = self._one(
            "SELECT result FROM tool_cache"
            " WHERE key = ? AND (expires_ms IS NULL OR expires_ms > ?)",
            (cache_key(tool, arguments), _now_ms()),
        )
        return ToolResult.model_validate_json(row[0]) if row else None

    def put(
        self, tool: str, arguments: dict[str, Any], result: ToolResult, ttl_s: float | None
    ) -> None:
        now = _now_ms()
        expires = now + int(ttl_s * 1000) if ttl_s is not None else None
        with self._transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO tool_cache VALUES (?, ?, ?, ?, ?)",
                (cache_key(tool, arguments), tool, result.model_dump_json(), now, expires),
            )
