"""SQLiteStore's audit trail: the append-only `audit_records` table (migration 7 in
sqlite.py), whose triggers refuse every UPDATE and DELETE. One INSERT per record, in its
own transaction on the sessions connection; listings use the indexes by time, session,
tool and outcome."""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from typing import Any

from runner.isolation.audit import AuditQuery, AuditRecord
from runner.stores.audit import AUDIT_COLUMNS, AuditLog, audit_row, audit_where, records_from_rows


class SQLiteAudit(AuditLog):
    """The audit section of SQLiteStore (a mixin: SQLiteStore provides these)."""

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _all(self, query: str, parameters: tuple[Any, ...] = ()) -> list[Any]:
        raise NotImplementedError

    def append_audit(self, record: AuditRecord) -> None:
        with self._transaction() as db:
            db.execute(f"INSERT INTO audit_records ({AUDIT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       audit_row(record))  # fmt: skip

    def audit_records(self, query: AuditQuery) -> list[AuditRecord]:
        where, parameters = audit_where(query, "?")
        limit = "" if query.limit is None else f" LIMIT {int(query.limit)}"
        rows = self._all(f"SELECT record FROM audit_records{where}"
                         f" ORDER BY at_ms DESC, seq DESC{limit}", tuple(parameters))  # fmt: skip
        return records_from_rows(rows, self.description)
