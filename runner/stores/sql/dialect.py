"""One SQL text for both engines: statements are written once with `?` marks and
`{now}` (database time in epoch ms), `{order}` (insertion order) and `{lock}` (a row
lock for the rest of the transaction, where the engine has one), and a Dialect renders
them. What both engines already spell alike (ON CONFLICT ... DO UPDATE upserts with
`excluded`, RETURNING, CTEs) is written as is.

As in DBOS's system database, only what differs is per engine: placeholders (SQLite's
qmark, psycopg's format style, where a literal `%` is doubled), the clock, the column
that keeps insertion order (SQLite's rowid; an identity `seq` in PostgreSQL) and row locks.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Session statuses a worker advances and whose deferred calls are handed out (not
#: frozen, quarantined, failed, cancelled or completed).
ACTIVE_STATUSES = "('running', 'waiting')"


@dataclass(frozen=True)
class Dialect:
    name: str
    #: The parameter mark ("?" or "%s").
    mark: str
    #: Database time in epoch milliseconds, as an SQL expression: one clock for every
    #: process sharing the database.
    now_ms: str
    #: The column that orders rows as they were inserted.
    order: str
    #: What makes a SELECT lock its rows until the commit ("" where a transaction
    #: already holds the one write lock).
    lock: str

    def sql(self, template: str) -> str:
        """`template` in this dialect."""
        text = template if self.mark == "?" else template.replace("%", "%%").replace("?", "%s")
        return (
            text.replace("{now}", self.now_ms)
            .replace("{order}", self.order)
            .replace("{lock}", self.lock)
        )


SQLITE = Dialect(
    "sqlite",
    mark="?",
    # ROUND, not a bare CAST: the julianday round trip can land a hair below the whole ms.
    now_ms="CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)",
    order="rowid",
    lock="",  # BEGIN IMMEDIATE took the database's one write lock
)
POSTGRES = Dialect(
    "postgresql",
    mark="%s",
    # Floored, as Python's int(time.time() * 1000).
    now_ms="floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
    order="seq",
    lock=" FOR UPDATE",
)
