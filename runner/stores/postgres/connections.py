"""Connections to PostgreSQL for the store: pools, transactions retried safely, redaction.

Every call runs as one transaction on a connection in autocommit mode, so that this
module, not a driver default, says where a transaction begins and ends:

- A write transaction starts with `BEGIN; SELECT pg_current_xact_id()`, so its
  transaction id is known before anything is written.
- A transient failure (serialization_failure, deadlock_detected, a connection that was
  dropped or could not be had, the server shutting down) before COMMIT was sent means
  the server rolled the transaction back: the whole call runs again from its first read,
  after a backoff, until the retry budget is spent. The compare-and-set writes re-check
  the version they were based on, so a retry never builds on a stale read.
- A connection lost while COMMIT was in flight leaves the outcome unknown to us. It is
  resolved by asking the server (on another connection) for that transaction's status,
  `pg_xact_status(xid)`, which PostgreSQL documents for exactly this case: `committed`
  returns what the call produced without writing again, `aborted` runs it again, `in
  progress` is asked again shortly. If the server cannot say (unreachable for the whole
  budget, or the id too old), the call fails with StoreError saying the outcome is
  unknown. Nothing is guessed, so no write is applied twice.
- Errors that are not transient (a constraint, a bug) are raised at once as StoreError.

Reads, and writes that are idempotent by construction (an update guarded by a fencing
token, an upsert of fixed values), run as autocommitted statements and are simply run
again; a load's several queries share one read-only REPEATABLE READ snapshot.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg.errors
from psycopg_pool import ConnectionPool, PoolTimeout

from runner.faults import crash_point
from runner.stores.base import StoreError, StoreUnavailable

logger = logging.getLogger(__name__)

T = TypeVar("T")
Connection = psycopg.Connection[tuple[Any, ...]]

#: Backoff between attempts: doubling from BACKOFF_S up to MAX_BACKOFF_S, with jitter.
BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0
#: Errors after which the server has certainly rolled the transaction back.
ROLLED_BACK = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)


def redact(url: str) -> str:
    """`url` without a password (in its user part or a `password=` parameter)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}:***@{host}"
    query = [(k, "***" if k == "password" else v) for k, v in parse_qsl(parts.query)]
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, safe="*")))


class Database:
    """A pool for the store's data calls and a small one for leases (so that renewing a
    lease never waits for a connection behind slow data calls), with the retry rules
    above. `budget_s` bounds how long one call keeps retrying."""

    def __init__(
        self,
        url: str,
        *,
        max_connections: int,
        budget_s: float,
        lease_budget_s: float,
        lease_lock_timeout_s: float,
        connect_timeout_s: float,
    ) -> None:
        self.url = url
        self.where = redact(url)
        self._secrets = _secrets(url)
        self.budget_s, self.lease_budget_s = budget_s, lease_budget_s
        options = {
            "autocommit": True,
            "connect_timeout": max(1, round(connect_timeout_s)),
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        }
        # A transaction a lost client left open must not hold its row locks for long
        # (ours never idle in a transaction), nor a lease call wait long on a row lock.
        data_settings = "SET idle_in_transaction_session_timeout = '30s'"
        lease_settings = (
            f"{data_settings}; SET lock_timeout = '{int(lease_lock_timeout_s * 1000)}ms'"
        )
        self._options: dict[str, Any] = options
        self._settings = (data_settings, lease_settings)
        self._connect_timeout_s = connect_timeout_s
        self._max_connections = max_connections
        self._pools: list[ConnectionPool[Connection]] = []

    def open_pools(self) -> None:
        """Open the pools (after `connect` has shown the server answers, so that an
        error names the real cause rather than a pool that never filled)."""
        data_settings, lease_settings = self._settings
        self.data = self._pool("agents-runner data", self.url, self._options, data_settings,
                               self._max_connections)  # fmt: skip
        self.leases = self._pool("agents-runner leases", self.url, self._options,
                                 lease_settings, 4)  # fmt: skip
        self._pools = [self.data, self.leases]
        try:
            for pool in self._pools:
                pool.open(wait=True, timeout=self._connect_timeout_s)
        except (PoolTimeout, psycopg.Error) as exc:
            self.close()
            raise StoreUnavailable(f"cannot connect to {self.where}: {self.scrub(exc)}") from None

    @staticmethod
    def _pool(
        name: str, url: str, options: dict[str, Any], settings: str, size: int
    ) -> ConnectionPool[Connection]:
        def configure(conn: Connection) -> None:
            conn.execute(settings.encode())

        return ConnectionPool(
            url,
            min_size=1,
            max_size=size,
            kwargs=options,
            name=name,
            configure=configure,
            open=False,
        )

    def close(self) -> None:
        for pool in self._pools:
            pool.close()

    def scrub(self, error: object) -> str:
        """An error's text on one line with no password in it (a driver may echo
        connection info; libpq adds hint lines)."""
        text = " ".join(str(error).split())
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def connect(self) -> Connection:
        """A connection of its own (outside the pools), autocommit."""
        try:
            return psycopg.connect(self.url, **self._options)
        except psycopg.Error as exc:
            raise StoreUnavailable(f"cannot connect to {self.where}: {self.scrub(exc)}") from None

    # --- calls --------------------------------------------------------------------------

    def statement(
        self,
        what: str,
        work: Callable[[Connection], T],
        *,
        lease: bool = False,
        writes: bool = False,
    ) -> T:
        """`work` as autocommitted statements, each idempotent (reads, upserts of fixed
        values, updates guarded by a token): run again whole on a transient failure."""
        if writes:
            crash_point("store.commit")  # where SQLite's transaction would commit
        return self._run(what, work, "statement", lease)

    def snapshot(self, what: str, work: Callable[[Connection], T]) -> T:
        """`work` in one read-only snapshot (a load's several queries agree)."""
        return self._run(what, work, "snapshot", False)

    def write(self, what: str, work: Callable[[Connection], T], *, lease: bool = False) -> T:
        """`work` in a write transaction, applied exactly once (see the module)."""
        return self._run(what, work, "write", lease)

    def _run(self, what: str, work: Callable[[Connection], T], mode: str, lease: bool) -> T:
        pool = self.leases if lease else self.data
        give_up = time.monotonic() + (self.lease_budget_s if lease else self.budget_s)
        attempt = 0
        while True:
            attempt += 1
            xid: str | None = None
            committing = False
            try:
                left = max(0.05, give_up - time.monotonic())
                with pool.connection(timeout=left) as conn:
                    if mode == "statement":
                        return work(conn)
                    try:
                        if mode == "write":
                            xid = _begin_write(conn)
                        else:
                            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                        result = work(conn)
                        crash_point("store.commit")  # inside the transaction: all or nothing
                        committing = True
                        conn.execute("COMMIT")
                        return result
                    except BaseException:
                        if not committing:
                            _rollback(conn)
                        raise
            except StoreError:
                raise  # decided by `work` (VersionConflict, FencedOut...): rolled back
            except (psycopg.Error, PoolTimeout) as exc:
                if not _transient(exc):
                    raise StoreError(f"{self.where}: {what} failed: {self.scrub(exc)}") from None
                if committing and xid is not None and not isinstance(exc, ROLLED_BACK):
                    if self._committed(what, xid, give_up):
                        logger.warning(
                            "%s: connection lost during COMMIT of %s; the server says it committed",
                            self.where,
                            what,
                        )
                        return result
                    logger.warning(
                        "%s: connection lost during COMMIT of %s; the server says"
                        " it rolled back, running it again",
                        self.where,
                        what,
                    )
                if time.monotonic() >= give_up:
                    raise StoreError(
                        f"{self.where}: {what} failed after {attempt} attempt(s):"
                        f" {self.scrub(exc) or type(exc).__name__}"
                    ) from None
                logger.info(
                    "%s: %s: transient failure (%s), attempt %d; retrying",
                    self.where,
                    what,
                    self.scrub(exc) or type(exc).__name__,
                    attempt,
                )
                time.sleep(_backoff(attempt, give_up))

    def _committed(self, what: str, xid: str, give_up: float) -> bool:
        """Whether transaction `xid` committed, as the server says; StoreError when it
        cannot be asked in time or does not know."""
        attempt = 0
        while True:
            attempt += 1
            status: str | None = "unreachable"
            try:
                with self.connect() as conn:
                    row = conn.execute("SELECT pg_xact_status(%s::xid8)", (xid,)).fetchone()
                status = row[0] if row else None
            except StoreError as exc:
                logger.info("asking for the outcome of %s: %s", what, exc)
            if status == "committed":
                return True
            if status == "aborted":
                return False
            if status is None or time.monotonic() >= give_up:
                raise StoreError(
                    f"{self.where}: the connection was lost while {what} was committing and"
                    f" its outcome is unknown (transaction {xid}: {status or 'no record'});"
                    " load the session again to see whether it was applied"
                )
            time.sleep(_backoff(attempt, give_up))  # in progress, or the server is away


class Listener:
    """A LISTEN connection of its own for one channel, opened at the first wait and again
    after a failure (meanwhile a wait sleeps, and its caller's polling carries on).
    Notifications that arrive between waits queue on the connection, so none is lost
    once the first wait has begun listening."""

    def __init__(self, db: Database, channel: str, description: str) -> None:
        self._db, self._channel, self._description = db, channel, description
        self._connection: Connection | None = None
        self._lock = threading.Lock()

    def wait(self, timeout_s: float) -> bool:
        give_up = time.monotonic() + timeout_s
        if not self._lock.acquire(timeout=timeout_s):
            return False  # another thread is listening
        try:
            if self._connection is None:
                self._connection = self._db.connect()
                self._connection.execute(f"LISTEN {self._channel}".encode())
            heard = False
            for _ in self._connection.notifies(
                timeout=max(0.0, give_up - time.monotonic()), stop_after=1
            ):
                heard = True
            if heard:  # several at once are one notification
                for _ in self._connection.notifies(timeout=0):
                    pass
            return heard
        except (psycopg.Error, StoreError) as exc:
            logger.warning("%s: listening on %s failed (%s); polling meanwhile",
                           self._description, self._channel, self._db.scrub(exc))  # fmt: skip
            self._drop()
            time.sleep(max(0.0, give_up - time.monotonic()))
            return False
        finally:
            self._lock.release()

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _begin_write(conn: Connection) -> str:
    cursor = conn.execute(b"BEGIN; SELECT pg_current_xact_id()::text")
    cursor.nextset()
    row = cursor.fetchone()
    assert row is not None
    return str(row[0])


def _rollback(conn: Connection) -> None:
    """Best effort: a broken connection rolled back on the server already, and the pool
    discards it; a healthy one must not go back to the pool mid-transaction."""
    if not conn.broken:
        with suppress(psycopg.Error):
            conn.execute("ROLLBACK")


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, (*ROLLED_BACK, PoolTimeout)):
        return True
    # Connection trouble, the server shutting down or restarting, a lock or statement
    # timeout: all leave nothing applied that COMMIT did not.
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


def _backoff(attempt: int, give_up: float) -> float:
    delay: float = min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (attempt - 1))
    return max(0.0, min(delay * random.uniform(0.5, 1.0), give_up - time.monotonic()))


def _secrets(url: str) -> list[str]:
    """The password as it may appear in an error message, raw or percent-decoded."""
    parts = urlsplit(url)
    found = [parts.password] if parts.password else []
    found += [v for k, v in parse_qsl(parts.query) if k == "password" and v]
    found += [unquote(s) for s in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


def rows(db: Connection, query: bytes | str, parameters: Any = None) -> list[tuple[Any, ...]]:
    return db.execute(query.encode() if isinstance(query, str) else query, parameters).fetchall()


def one(db: Connection, query: str, parameters: Any = None) -> tuple[Any, ...] | None:
    return db.execute(query.encode(), parameters).fetchone()
