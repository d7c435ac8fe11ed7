"""PostgresStore: the parts (runner.stores.sql, and this package's halves of them) on a
PostgreSQL server shared by many hosts. See the package docstring for what differs from
SQLite and why."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from runner.stores.base import StoreError
from runner.stores.composed import ComposedStore, ForwardsAudit, StoreParts
from runner.stores.postgres.call_claims import PostgresCallClaims
from runner.stores.postgres.connections import Connection, Database, one
from runner.stores.postgres.engine import PostgresEngine
from runner.stores.postgres.events import PostgresEventLog
from runner.stores.postgres.leases import PostgresLeases
from runner.stores.postgres.schema import migrate
from runner.stores.postgres.sessions import PostgresSessions
from runner.stores.sql.audit import SqlAuditLog
from runner.stores.sql.cache import SqlToolCache
from runner.stores.sql.leased import SqlLeasedSessions
from runner.stores.sql.ledger import SqlEffectLedger


class PostgresStore(ForwardsAudit, ComposedStore):
    """Sessions, leases, the event log, the effect ledger, claims, the tool cache and the
    audit trail in one PostgreSQL database, for any number of processes on any number of
    hosts.

    Data calls use a pool of up to `max_connections`; leases a pool of their own (two
    connections, a short lock timeout) so a renewal never waits behind data calls;
    `wait_for_due` and `wait_for_events` a dedicated LISTEN connection each. Any thread
    may call any method.
    """

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = 8,
        retry_budget_s: float = 30.0,
        lease_retry_budget_s: float = 2.0,
        lease_lock_timeout_s: float = 2.0,
        connect_timeout_s: float = 10.0,
        offer_s: float = 2.0,
    ) -> None:
        self._db = Database(
            url,
            max_connections=max_connections,
            budget_s=retry_budget_s,
            lease_budget_s=lease_retry_budget_s,
            lease_lock_timeout_s=lease_lock_timeout_s,
            connect_timeout_s=connect_timeout_s,
        )
        self.description = f"PostgreSQL store {self._db.where}"
        engine = PostgresEngine(self._db)
        self._events = PostgresEventLog(engine, self.description)
        self._leases = PostgresLeases(engine, offer_s, self.description)
        sessions = PostgresSessions(engine, self._events, self.description)
        ComposedStore.__init__(self, StoreParts(
            sessions=sessions,
            leases=self._leases,
            events=self._events,
            ledger=SqlEffectLedger(engine),
            call_claims=PostgresCallClaims(engine),
            cache=SqlToolCache(engine),
            leased=SqlLeasedSessions(engine, sessions, self._leases),
        ))  # fmt: skip
        self.audit = SqlAuditLog(engine, self.description)
        try:
            with self._db.connect() as conn:
                self._version = migrate(conn, self.description)
            self._db.open_pools()
            self.now_ms()  # measures this host's clock against the database's
        except psycopg.Error as exc:
            self._db.close()
            raise StoreError(f"cannot prepare {self.description}: {self._db.scrub(exc)}") from None
        except BaseException:
            self._db.close()
            raise

    def close(self) -> None:
        self._leases.close()
        self._events.close()
        self._db.close()

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A pooled connection (autocommit), for inspection from tests and tools; the
        store's own methods never share it while it is out."""
        with self._db.data.connection() as conn:
            yield conn

    def schema_version(self) -> int:
        row = self._db.statement(
            "reading the schema version",
            lambda db: one(db, "SELECT MAX(version) FROM schema_migrations"),
        )
        return int(row[0]) if row else 0
