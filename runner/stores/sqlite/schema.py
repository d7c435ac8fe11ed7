"""The SQLite store's tables, as numbered migrations recorded in `schema_migrations`.

Every table of the store is here (DBOS's rule: one place answers "what is stored, and
where"): sessions as a header row, `session_turns` and `session_calls` rows, the agent
definitions, the continuation index (written in the same transaction as the call, so
`session complete TOKEN` is a key lookup, not a scan), the tool cache, leases, the
effect ledger, late results, the event log, deferred-call claims and the audit trail.
Opening a file applies the missing migrations in one transaction and refuses a file
from a newer version of this program.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator

from runner.stores.base import StoreError

#: Each entry moves the schema from version N-1 to N. Append only: never edit one.
MIGRATIONS: tuple[str, ...] = (
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
    # 6: claims: a deferred call handed to a claimer until `expires_ms`. One row
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
)
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(db: sqlite3.Connection) -> None:
    """Inside a write transaction: apply what is missing. StoreError for a file that a
    newer program migrated further."""
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
        db.execute(
            "INSERT INTO schema_migrations VALUES (?, ?)", (version, int(time.time() * 1000))
        )


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
