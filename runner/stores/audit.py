"""The audit trail in a store: where a store keeps the records of isolated calls.

SQLiteStore and PostgresStore keep them in an append-only `audit_records` table (the
database refuses UPDATE and DELETE on it), indexed by time, session, tool and outcome
(runner.stores.sql.audit).
A file store keeps them in ROOT/audit.jsonl (runner.isolation.audit's JSON-lines file);
a composite store in its primary's. `audit_log_of(store)` finds a store's log,
`audit_sink_of(store)` the sink an AuditedRunner writes to.
"""

from __future__ import annotations

from pathlib import Path

from runner.isolation.audit import (
    AuditQuery,
    AuditRecord,
    JsonLinesAuditSink,
    read_audit_file,
    select,
)
from runner.stores.base import AuditLog, SessionStore
from runner.stores.composite import CompositeStore
from runner.stores.files import FileSessionStore

#: The audit file of a file store, under its root.
FILE_STORE_AUDIT = "audit.jsonl"


class FileAuditLog(AuditLog):
    """The records in a JSON-lines file (a file store's, or any `--audit file:PATH`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.description = f"audit file {self.path}"
        self._sink: JsonLinesAuditSink | None = None

    def append_audit(self, record: AuditRecord) -> None:
        if self._sink is None:
            self._sink = JsonLinesAuditSink(self.path)
        self._sink.append(record)

    def audit_records(self, query: AuditQuery) -> list[AuditRecord]:
        if not self.path.exists():
            return []
        return select(read_audit_file(self.path), query)


class StoreAuditSink:
    """An AuditSink writing to an audit log (a store's)."""

    def __init__(self, log: AuditLog) -> None:
        self.log = log
        self.description = log.description

    def append(self, record: AuditRecord) -> None:
        self.log.append_audit(record)


def audit_log_of(store: SessionStore) -> AuditLog | None:
    """Where `store` keeps audit records (None: a store that has no audit log)."""
    if isinstance(store, AuditLog):
        return store
    if isinstance(store, CompositeStore):
        return audit_log_of(store.primary)
    if isinstance(store, FileSessionStore):
        return FileAuditLog(store.root / FILE_STORE_AUDIT)
    return None


def audit_sink_of(store: SessionStore) -> StoreAuditSink | None:
    """The sink that writes to `store`'s audit log, if it has one."""
    log = audit_log_of(store)
    return StoreAuditSink(log) if log is not None else None


__all__ = [
    "FILE_STORE_AUDIT",
    "AuditLog",
    "FileAuditLog",
    "StoreAuditSink",
    "audit_log_of",
    "audit_sink_of",
]
