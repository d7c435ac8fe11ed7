"""The embedded default store: one SQLite file in WAL mode, every table in this module.

Migrations are numbered and recorded in `schema_migrations`; opening a file applies the
missing ones in one transaction and refuses a file from a newer version of this program.
A session row holds the session document and its version; `save` is
`UPDATE ... WHERE id = ? AND version = ?`, so a stale writer changes zero rows and gets
VersionConflict. Continuation tokens are indexed in their own table, written in the same
transaction as the session, so `session complete TOKEN` is a key lookup, not a scan.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runner.session.models import Session, ToolResult
from runner.stores.base import (
    Continuation,
    SessionNotFound,
    SessionSummary,
    StoreError,
    VersionConflict,
    cache_key,
)

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
]
SCHEMA_VERSION = len(MIGRATIONS)


def _now_ms() -> int:
    return int(time.time() * 1000)


class SQLiteStore:
    """Sessions, continuations and the tool cache in one SQLite database file."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE below).
            self.db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the store {self.path}: {exc}") from None

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the write lock up front (no upgrade deadlock)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

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
                for statement in MIGRATIONS[version - 1].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, _now_ms()))

    def schema_version(self) -> int:
        return self.db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0]

    # --- sessions ----------------------------------------------------------------------

    def create(self, session: Session, agent_document: dict[str, Any]) -> Session:
        stored = session.model_copy(update={"version": session.version or 1})
        with self._transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO agents VALUES (?, ?)",
                (session.agent_hash, json.dumps(agent_document, sort_keys=True)),
            )
            try:
                db.execute(
                    "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (stored.id, stored.version, stored.status, stored.agent_slug, stored.agent_hash,
                     stored.schema_version, stored.to_json(), stored.created_ms,
                     stored.updated_ms),
                )  # fmt: skip
            except sqlite3.IntegrityError:
                raise StoreError(f"session {session.id} already exists") from None
            self._index_tokens(db, stored)
        return stored

    def load(self, session_id: str) -> Session:
        row = self.db.execute(
            "SELECT document, version FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        return Session.from_json(row[0]).model_copy(update={"version": row[1]})

    def save(self, session: Session) -> Session:
        stored = session.model_copy(update={"version": session.version + 1,
                                            "updated_ms": _now_ms()})  # fmt: skip
        with self._transaction() as db:
            changed = db.execute(
                "UPDATE sessions SET version = ?, status = ?, document = ?, updated_ms = ?"
                " WHERE id = ? AND version = ?",
                (stored.version, stored.status, stored.to_json(), stored.updated_ms,
                 session.id, session.version),
            ).rowcount  # fmt: skip
            if changed == 0:
                row = db.execute(
                    "SELECT version FROM sessions WHERE id = ?", (session.id,)
                ).fetchone()
                if row is None:
                    raise SessionNotFound(session.id)
                raise VersionConflict(session.id, session.version, row[0])
            self._index_tokens(db, stored)
        return stored

    def _index_tokens(self, db: sqlite3.Connection, session: Session) -> None:
        db.executemany(
            "INSERT OR IGNORE INTO continuations VALUES (?, ?, ?)",
            [(call.token, session.id, call.id) for call in session.calls.values()],
        )

    def agent_document(self, agent_hash: str) -> dict[str, Any]:
        query = "SELECT document FROM agents WHERE hash = ?"
        row = self.db.execute(query, (agent_hash,)).fetchone()
        if row is None:
            raise StoreError(f"no agent definition with hash {agent_hash[:12]} in this store")
        return json.loads(row[0])

    def list(self, status: str | None = None) -> list[SessionSummary]:
        query = "SELECT id, status, agent_slug, version, updated_ms FROM sessions"
        rows = self.db.execute(
            query + (" WHERE status = ? ORDER BY updated_ms" if status else " ORDER BY updated_ms"),
            (status,) if status else (),
        ).fetchall()
        return [SessionSummary(*row) for row in rows]

    # --- continuations -----------------------------------------------------------------

    def find(self, token: str) -> Continuation | None:
        row = self.db.execute(
            "SELECT session_id, call_id FROM continuations WHERE token = ?", (token,)
        ).fetchone()
        return Continuation(token, row[0], row[1]) if row else None

    # --- tool cache --------------------------------------------------------------------

    def get(self, tool: str, arguments: dict[str, Any]) -> ToolResult | None:
        row = self.db.execute(
            "SELECT result FROM tool_cache"
            " WHERE key = ? AND (expires_ms IS NULL OR expires_ms > ?)",
            (cache_key(tool, arguments), _now_ms()),
        ).fetchone()
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
