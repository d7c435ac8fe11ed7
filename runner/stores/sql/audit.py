"""The audit trail in a database, the same SQL on both engines: the append-only
`audit_records` table (each engine's schema adds the triggers that refuse UPDATE and
DELETE). One INSERT per record, a transaction applied once; listings use the indexes by
time, session, tool and outcome."""

from __future__ import annotations

from typing import Any

from runner.isolation.audit import AuditError, AuditQuery, AuditRecord
from runner.stores.base import AuditLog, StoreError
from runner.stores.sql.engine import Engine, Transaction, rows

#: The columns an audit row has besides the record itself, as the table names them.
AUDIT_COLUMNS = "at_ms, session_id, call_id, tool, runner, outcome, record"


class SqlAuditLog(AuditLog):
    def __init__(self, engine: Engine[Any], description: str) -> None:
        self._engine = engine
        self.description = description
        self._append = engine.dialect.sql(
            f"INSERT INTO audit_records ({AUDIT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
        )

    def append_audit(self, record: AuditRecord) -> None:
        def work(tx: Transaction) -> None:
            tx.execute(self._append, audit_row(record))

        self._engine.write(f"appending the audit record of call {record.request_id}", work)

    def audit_records(self, query: AuditQuery) -> list[AuditRecord]:
        where, parameters = audit_where(query)
        limit = "" if query.limit is None else f" LIMIT {int(query.limit)}"
        statement = self._engine.dialect.sql(
            f"SELECT record FROM audit_records{where} ORDER BY at_ms DESC, seq DESC{limit}"
        )
        found = self._engine.read(
            "listing audit records", lambda tx: rows(tx, statement, tuple(parameters))
        )
        return records_from_rows(found, self.description)


def audit_row(record: AuditRecord) -> tuple[Any, ...]:
    """The values of AUDIT_COLUMNS for `record`."""
    return (record.at_ms, record.session_id, record.call_id, record.tool, record.runner,
            record.outcome, record.to_json())  # fmt: skip


def audit_where(query: AuditQuery) -> tuple[str, list[Any]]:
    """The WHERE clause (maybe empty, with `?` marks) and parameters for `query`."""
    clauses: list[str] = []
    parameters: list[Any] = []
    for column, value, test in (("session_id", query.session_id, "="), ("tool", query.tool, "="),
                                ("outcome", query.outcome, "="), ("at_ms", query.since_ms, ">="),
                                ("at_ms", query.until_ms, "<")):  # fmt: skip
        if value is not None:
            clauses.append(f"{column} {test} ?")
            parameters.append(value)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), parameters


def records_from_rows(rows: list[tuple[Any, ...]], where: str) -> list[AuditRecord]:
    """Rows of (record,) newest first, as records oldest first."""
    try:
        return [AuditRecord.from_json(row[0]) for row in reversed(rows)]
    except AuditError as exc:
        raise StoreError(f"{where}: an audit record in the store does not parse: {exc}") from None
