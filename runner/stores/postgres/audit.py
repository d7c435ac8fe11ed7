"""PostgresStore's audit trail: the append-only `audit_records` table (migration 4 in
schema.py), whose trigger refuses every UPDATE, DELETE and TRUNCATE. One INSERT per
record (a write applied exactly once, as connections.py says); listings use the
indexes by time, session, tool and outcome."""

from __future__ import annotations

import builtins

from runner.isolation.audit import AuditQuery, AuditRecord
from runner.stores.audit import AUDIT_COLUMNS, AuditLog, audit_row, audit_where, records_from_rows
from runner.stores.postgres.connections import Connection, Database, rows


class PostgresAudit(AuditLog):
    """The audit section of PostgresStore (a mixin: PostgresStore sets `_db` up)."""

    _db: Database

    def append_audit(self, record: AuditRecord) -> None:
        def work(db: Connection) -> None:
            db.execute(f"INSERT INTO audit_records ({AUDIT_COLUMNS})"
                       " VALUES (%s, %s, %s, %s, %s, %s, %s)", audit_row(record))  # fmt: skip

        self._db.write(f"appending the audit record of call {record.request_id}", work)

    def audit_records(self, query: AuditQuery) -> builtins.list[AuditRecord]:
        where, parameters = audit_where(query, "%s")
        limit = "" if query.limit is None else f" LIMIT {int(query.limit)}"
        found = self._db.statement(
            "listing audit records",
            lambda db: rows(db, f"SELECT record FROM audit_records{where}"
                                f" ORDER BY at_ms DESC, seq DESC{limit}", parameters),
        )  # fmt: skip
        return records_from_rows(found, self.description)
