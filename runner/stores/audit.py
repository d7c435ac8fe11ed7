"""The audit trail in a store: where a store keeps the records of isolated calls.

SQLiteStore and PostgresStore keep them in an append-only `audit_records` table (the
database refuses UPDATE and DELETE on it), indexed by time, session, tool and outcome.
A file store keeps them in ROOT/audit.jsonl (runner.isolation.audit's JSON-lines file);
a composite store in its primary's. `audit_log_of(store)` finds a store's log,
`audit_sink_of(store)` the sink an AuditedRunner writes to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.isolation.audit import (
    AuditError,
    AuditQuery,
    AuditRecord,
    JsonLinesAuditSink,
    read_audit_file,
    select,
)
from runner.stores.base import AuditLog, SessionStore, StoreError
from runner.stores.composite import CompositeStore
from runner.stores.files import FileSessionStore

#: The audit file of a file store, under its root.
FILE_STORE_AUDIT = "audit.jsonl"
#: The columns an audit row has besides the record itself, as the table names them.
AUDIT_COLUMNS = "at_ms, session_id, call_id, tool, runner, outcome, record"


def audit_row(record: AuditRecord) -> tuple[Any, ...]:
    """The values of AUDIT_COLUMNS for `record`."""
    return (record.at_ms, record.session_id, record.call_id, record.tool, record.runner,
            record.outcome, record.to_json())  # fmt: skip


def audit_where(query: AuditQuery, mark: str) -> tuple[str, list[Any]]:
    """The WHERE clause (maybe empty) and parameters for `query`; `mark`: "?" or "%s"."""
    clauses: list[str] = []
    parameters: list[Any] = []
    for column, value, test in (("session_id", query.session_id, "="), ("tool", query.tool, "="),
                                ("outcome", query.outcome, "="), ("at_ms", query.since_ms, ">="),
                                ("at_ms", query.until_ms, "<")):  # fmt: skip
        if value is not None:
            clauses.append(f"{column} {test} {mark}")
            parameters.append(value)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), parameters


def records_from_rows(rows: list[tuple[Any, ...]], where: str) -> list[AuditRecord]:
    """Rows of (record,) newest first, as records oldest first."""
    try:
        return [AuditRecord.from_json(row[0]) for row in reversed(rows)]
    except AuditError as exc:
        raise StoreError(f"{where}: an audit record in the store does not parse: {exc}") from None


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
    "AUDIT_COLUMNS",
    "FILE_STORE_AUDIT",
    "AuditLog",
    "FileAuditLog",
    "StoreAuditSink",
    "audit_log_of",
    "audit_row",
    "audit_sink_of",
    "audit_where",
    "records_from_rows",
]
