"""Stores: where sessions, continuation tokens and cached tool results live.

base.py states the interfaces as types: a store is made of small parts (sessions;
leases and due-session offers; the event log; the effect ledger; deferred-call claims;
the tool cache; the audit log), DurableStore is their union, and the compare-and-set
rule. composed.py assembles a DurableStore from part objects; sql/ holds the parts and
the SQL both database engines share, rendered by a dialect; sqlite/ is the embedded
durable default (one WAL file, numbered migrations); postgres/ is the same on a
PostgreSQL server shared by many hosts (SKIP LOCKED offers and claims, LISTEN/NOTIFY);
files.py keeps sessions as JSON files (single process); composite.py reads through a
list of stores and writes to the first (it swaps its primary's sessions part). audit.py
finds the audit trail of isolated calls in whichever of them is in use.
"""

from runner.stores.audit import AuditLog, FileAuditLog, audit_log_of, audit_sink_of
from runner.stores.base import (
    CallClaims,
    Claim,
    ClaimLost,
    Continuation,
    DurableStore,
    Effect,
    EffectLedger,
    Event,
    EventLog,
    FencedOut,
    FencedSessions,
    Lease,
    LeasedSession,
    LeasedSessions,
    Leases,
    SessionNotFound,
    SessionStore,
    SessionSummary,
    StoreError,
    StoreUnavailable,
    ToolCache,
    VersionConflict,
    cache_key,
)
from runner.stores.composed import ComposedStore, StoreParts
from runner.stores.composite import CompositeSessions, CompositeStore, DurableCompositeStore
from runner.stores.files import FileSessionStore
from runner.stores.locations import open_store
from runner.stores.postgres import PostgresStore
from runner.stores.sqlite import SQLiteStore

__all__ = [
    "AuditLog",
    "CallClaims",
    "Claim",
    "ClaimLost",
    "ComposedStore",
    "CompositeSessions",
    "CompositeStore",
    "Continuation",
    "DurableCompositeStore",
    "DurableStore",
    "Effect",
    "EffectLedger",
    "Event",
    "EventLog",
    "FencedOut",
    "FencedSessions",
    "FileAuditLog",
    "FileSessionStore",
    "Lease",
    "LeasedSession",
    "LeasedSessions",
    "Leases",
    "PostgresStore",
    "SQLiteStore",
    "SessionNotFound",
    "SessionStore",
    "SessionSummary",
    "StoreError",
    "StoreParts",
    "StoreUnavailable",
    "ToolCache",
    "VersionConflict",
    "audit_log_of",
    "audit_sink_of",
    "cache_key",
    "open_store",
]
