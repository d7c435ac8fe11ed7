"""Stores: where sessions, continuation tokens and cached tool results live.

base.py states the interfaces as types (SessionStore; DurableStore adds leases, fencing,
the effect ledger and the cache) and the compare-and-set rule; sqlite.py is the embedded
durable default (one WAL file, numbered migrations); postgres/ is the same on a PostgreSQL
server shared by many hosts (SKIP LOCKED claims, LISTEN/NOTIFY); files.py keeps sessions
as JSON files (single process); composite.py reads through a list of stores and writes to
the first. audit.py keeps the audit trail of isolated calls in whichever of them is in use.
"""

from runner.stores.audit import AuditLog, FileAuditLog, audit_log_of, audit_sink_of
from runner.stores.base import (
    Claim,
    ClaimLost,
    Continuation,
    DurableStore,
    Effect,
    Event,
    FencedOut,
    Lease,
    SessionNotFound,
    SessionStore,
    SessionSummary,
    StoreError,
    StoreUnavailable,
    ToolCache,
    VersionConflict,
    cache_key,
)
from runner.stores.composite import CompositeStore, DurableCompositeStore
from runner.stores.files import FileSessionStore
from runner.stores.locations import open_store
from runner.stores.postgres import PostgresStore
from runner.stores.sqlite import SQLiteStore

__all__ = [
    "AuditLog",
    "Claim",
    "ClaimLost",
    "CompositeStore",
    "Continuation",
    "DurableCompositeStore",
    "DurableStore",
    "Effect",
    "Event",
    "FencedOut",
    "FileAuditLog",
    "FileSessionStore",
    "Lease",
    "PostgresStore",
    "SQLiteStore",
    "SessionNotFound",
    "SessionStore",
    "SessionSummary",
    "StoreError",
    "StoreUnavailable",
    "ToolCache",
    "VersionConflict",
    "audit_log_of",
    "audit_sink_of",
    "cache_key",
    "open_store",
]
