"""The PostgreSQL store's tables, as numbered migrations recorded in `schema_migrations`.

The tables are SQLite's (runner.stores.sqlite) as of its schema 4, in PostgreSQL types:
a session is a header row plus `session_turns` and `session_calls` rows; leases, the
effect ledger, late results, continuations and the tool cache have a table each. Two
additions: `seq` columns keep insertion order (SQLite's rowid), and
`sessions.offered_to`/`offered_until_ms` record which store instance `due_sessions` last
handed a session to (see PostgresStore.due_sessions).

Opening a database applies the missing migrations in one transaction under an advisory
lock (several workers starting at once apply each exactly once) and refuses a database
that a newer program migrated further.
"""

from __future__ import annotations

import time

import psycopg

from runner.faults import crash_point
from runner.stores.base import StoreError

#: Each entry moves the schema from version N-1 to N. Append only: never edit one.
MIGRATIONS: tuple[str, ...] = (
    # 1: everything SQLite's schema 4 has.
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        version BIGINT NOT NULL,
        status TEXT NOT NULL,
        agent_slug TEXT NOT NULL,
        agent_hash TEXT NOT NULL,
        schema_version INTEGER NOT NULL,
        document TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL,
        due_ms BIGINT,
        turn_count INTEGER NOT NULL DEFAULT 0,
        offered_to TEXT,
        offered_until_ms BIGINT,
        seq BIGINT GENERATED ALWAYS AS IDENTITY
    );
    CREATE INDEX sessions_by_status ON sessions (status, updated_ms);
    CREATE INDEX sessions_by_due ON sessions (due_ms) WHERE due_ms IS NOT NULL;
    CREATE TABLE agents (
        hash TEXT PRIMARY KEY,
        document TEXT NOT NULL
    );
    CREATE TABLE session_turns (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        idx INTEGER NOT NULL,
        document TEXT NOT NULL,
        PRIMARY KEY (session_id, idx)
    );
    CREATE TABLE session_calls (
        seq BIGINT GENERATED ALWAYS AS IDENTITY,
        session_id TEXT NOT NULL REFERENCES sessions (id),
        call_id TEXT NOT NULL,
        turn INTEGER NOT NULL,
        open BOOLEAN NOT NULL,
        document TEXT NOT NULL,
        PRIMARY KEY (session_id, call_id)
    );
    CREATE INDEX session_calls_by_turn ON session_calls (session_id, turn);
    CREATE INDEX session_calls_open ON session_calls (session_id) WHERE open;
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
        created_ms BIGINT NOT NULL,
        expires_ms BIGINT
    );
    CREATE TABLE leases (
        name TEXT PRIMARY KEY,
        owner TEXT,
        expires_ms BIGINT NOT NULL,
        fencing_token BIGINT NOT NULL,
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
        requested_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL
    );
    CREATE TABLE late_results (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        token TEXT NOT NULL,
        session_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        result TEXT NOT NULL,
        received_ms BIGINT NOT NULL
    );
    CREATE INDEX late_results_by_session ON late_results (session_id, received_ms, seq);
    """,
    # 2: SQLite's schema 5, the event log. `seq` comes from the one `event_counter` row,
    # updated in the transaction that writes the events: its row lock makes event-writing
    # commits take turns, so `seq` order is commit order (a sequence's is not, and a
    # reader resuming after seq N would miss a smaller one committed later).
    """
    CREATE TABLE events (
        seq BIGINT PRIMARY KEY,
        session_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        call_id TEXT,
        data TEXT NOT NULL,
        at_ms BIGINT NOT NULL
    );
    CREATE INDEX events_by_session ON events (session_id, seq);
    CREATE TABLE event_counter (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        last_seq BIGINT NOT NULL
    );
    INSERT INTO event_counter VALUES (1, 0);
    """,
    # 3: SQLite's schema 6, claims (and calls' state and tool as columns).
    """
    CREATE TABLE claims (
        session_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        token TEXT NOT NULL UNIQUE,
        tool TEXT NOT NULL,
        worker TEXT NOT NULL,
        state TEXT NOT NULL,
        claimed_ms BIGINT NOT NULL,
        expires_ms BIGINT NOT NULL,
        lease_ms BIGINT NOT NULL,
        continuation TEXT NOT NULL,
        PRIMARY KEY (session_id, call_id)
    );
    CREATE INDEX claims_by_state ON claims (state, expires_ms);
    ALTER TABLE session_calls ADD COLUMN state TEXT, ADD COLUMN tool TEXT;
    UPDATE session_calls SET state = document::jsonb ->> 'state',
                             tool = document::jsonb ->> 'tool';
    CREATE INDEX session_calls_deferred ON session_calls (tool, seq) WHERE state = 'deferred';
    """,
    # 4: SQLite's schema 7, the audit trail: append-only (the trigger refuses UPDATE,
    # DELETE and TRUNCATE), indexed by time, session, tool and outcome.
    """
    CREATE TABLE audit_records (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at_ms BIGINT NOT NULL,
        session_id TEXT,
        call_id TEXT,
        tool TEXT NOT NULL,
        runner TEXT NOT NULL,
        outcome TEXT NOT NULL,
        record TEXT NOT NULL,
        recorded_ms BIGINT NOT NULL
            DEFAULT (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint
    );
    CREATE INDEX audit_records_by_time ON audit_records (at_ms);
    CREATE INDEX audit_records_by_session ON audit_records (session_id, at_ms);
    CREATE INDEX audit_records_by_tool ON audit_records (tool, at_ms);
    CREATE INDEX audit_records_by_outcome ON audit_records (outcome, at_ms);
    CREATE FUNCTION audit_records_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'audit_records is append-only (% refused)', TG_OP;
    END $$;
    CREATE TRIGGER audit_records_no_change BEFORE UPDATE OR DELETE ON audit_records
        FOR EACH ROW EXECUTE FUNCTION audit_records_append_only();
    CREATE TRIGGER audit_records_no_truncate BEFORE TRUNCATE ON audit_records
        FOR EACH STATEMENT EXECUTE FUNCTION audit_records_append_only();
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
#: Held (for one transaction) by whoever migrates: an arbitrary constant of our own.
MIGRATION_LOCK = 0x61676E74


def migrate(db: psycopg.Connection[tuple[object, ...]], where: str) -> int:
    """Apply what is missing, in one transaction (`db` in autocommit mode); returns the
    version the database is at. StoreError for a database newer than this program."""
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations"
            " (version INTEGER PRIMARY KEY, applied_ms BIGINT NOT NULL)"
        )
        row = db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        current = int(row[0]) if row and row[0] is not None else 0  # type: ignore[call-overload]
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"{where}: schema version {current} is newer than this program's"
                f" {SCHEMA_VERSION}; upgrade agents-runner"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            db.execute(MIGRATIONS[version - 1].encode())  # several statements: no parameters
            db.execute(
                "INSERT INTO schema_migrations VALUES (%s, %s)",
                (version, int(time.time() * 1000)),
            )
        crash_point("store.commit")  # as SQLite's: opening a store passes it too
    return max(current, SCHEMA_VERSION)
