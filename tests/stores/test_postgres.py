"""What is PostgreSQL's own in the PostgreSQL store, on a real server: migrations,
transient failures retried exactly once (a killed backend, a real deadlock, a connection
cut while COMMIT is in flight), SKIP LOCKED claims, LISTEN/NOTIFY, and no password shown.

The behaviour both engines share is tested once for both (tests/stores, tests/durability).
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from runner.session import Session, ToolResult
from runner.stores import PostgresStore, StoreError, open_store
from runner.stores.postgres import SCHEMA_VERSION
from tests.conftest import REPO


@pytest.fixture
def store(postgres_url: str) -> Iterator[PostgresStore]:
    with PostgresStore(postgres_url) as opened:
        yield opened


def new_session(store: PostgresStore, prompt: str = "hi") -> Session:
    return store.create(Session.start("a", "h1", prompt), {"slug": "a"})


def admin(url: str) -> psycopg.Connection:
    """A connection of the test's own, beside the store's."""
    return psycopg.connect(url, autocommit=True)


def wait_until(check: Callable[[], object], what: str, limit_s: float = 30.0) -> object:
    """Poll `check` until it is truthy; a bounded wait, never a timing assertion."""
    give_up = time.monotonic() + limit_s
    while not (found := check()):
        if time.monotonic() > give_up:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)
    return found


def waiting_backend(db: psycopg.Connection, query_start: str) -> int | None:
    """The pid of a backend blocked on a lock in a query starting so (`db` outside a
    transaction: inside one, pg_stat_activity would not change)."""
    row = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND query LIKE %s",
        (query_start + "%",),
    ).fetchone()
    return row[0] if row else None


# --- migrations ------------------------------------------------------------------------


def test_migrations_are_recorded_once_and_a_newer_database_is_refused(postgres_url):
    with PostgresStore(postgres_url) as store:
        assert store.schema_version() == SCHEMA_VERSION
    with PostgresStore(postgres_url), admin(postgres_url) as db:  # reopening applies nothing
        assert db.execute("SELECT COUNT(*) FROM schema_migrations").fetchone() == (SCHEMA_VERSION,)
        db.execute("INSERT INTO schema_migrations VALUES (%s, 0)", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1} is newer than"
                       " this program's") as refused:  # fmt: skip
        PostgresStore(postgres_url)
    assert "upgrade agents-runner" in str(refused.value)


def test_stores_opened_at_once_migrate_the_database_once(postgres_url):
    with ThreadPoolExecutor(4) as pool:
        stores = list(pool.map(lambda _: PostgresStore(postgres_url), range(4)))
    for store in stores:
        store.close()
    with admin(postgres_url) as db:
        assert db.execute("SELECT COUNT(*) FROM schema_migrations").fetchone() == (SCHEMA_VERSION,)


# --- transient failures, each applied exactly once ------------------------------------


def test_a_backend_killed_mid_save_is_retried_and_applied_once(postgres_url, store, caplog):
    caplog.set_level(logging.INFO, logger="runner.stores.postgres")
    session = new_session(store)
    with admin(postgres_url) as db, admin(postgres_url) as watcher, ThreadPoolExecutor(1) as pool:
        db.execute("BEGIN")
        db.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session.id,))
        session.final_answer = "once"
        saving = pool.submit(store.save, session)
        # The store's save waits on the row lock: its backend is killed mid-transaction.
        pid = wait_until(lambda: waiting_backend(watcher, "SELECT version"), "the save to wait")
        watcher.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_until(lambda: "transient failure" in caplog.text, "the store to see the failure")
        db.execute("COMMIT")  # the retry now gets the row
        saved = saving.result(timeout=60)
    assert saved.version == session.version + 1
    again = store.load(session.id)
    assert (again.version, again.final_answer) == (session.version + 1, "once")


def test_a_deadlock_is_retried_and_the_write_applied_once(postgres_url, store, caplog):
    """A real deadlock: the store's fenced save holds the lease row and waits for the
    session row, which the test holds while it waits for the lease row."""
    session = new_session(store)
    lease = store.acquire_lease(session.id, "me", ttl_s=60)
    with admin(postgres_url) as db, admin(postgres_url) as watcher, ThreadPoolExecutor(1) as pool:
        db.execute("SET deadlock_timeout = '60s'")  # the store's backend is the one to detect it
        db.execute("BEGIN")
        db.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session.id,))
        session.final_answer = "once"
        caplog.set_level(logging.INFO, logger="runner.stores.postgres")
        saving = pool.submit(store.save, session, (lease,))
        wait_until(lambda: waiting_backend(watcher, "SELECT version"), "the save to wait")
        # Blocks on the store's FOR SHARE until PostgreSQL breaks the cycle.
        db.execute("UPDATE leases SET expires_ms = expires_ms WHERE name = %s", (session.id,))
        db.execute("COMMIT")
        saved = saving.result(timeout=60)
    assert "deadlock detected" in caplog.text and "retrying" in caplog.text
    assert saved.version == session.version + 1
    assert store.load(session.id).version == session.version + 1
    assert store.lease(session.id).fencing_token == lease.fencing_token  # unchanged


class CuttingProxy:
    """A TCP proxy on 127.0.0.1 in front of the server that, once armed, forwards the
    next COMMIT and then cuts that client off before the server's answer reaches it:
    the commit happens, and the client cannot know."""

    def __init__(self, port: int) -> None:
        self.upstream = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            cut = threading.Event()
            threading.Thread(
                target=self._to_server, args=(client, server, cut), daemon=True
            ).start()
            threading.Thread(
                target=self._to_client, args=(server, client, cut), daemon=True
            ).start()

    def _to_server(
        self, client: socket.socket, server: socket.socket, cut: threading.Event
    ) -> None:
        pending, started = b"", False
        while data := _receive(client):
            pending += data
            while True:  # whole messages: a startup packet, then type byte + length
                head = 4 if not started else 5
                if len(pending) < head:
                    break
                length = int.from_bytes(pending[head - 4 : head], "big") + head - 4
                if len(pending) < length:
                    break
                message, pending = pending[:length], pending[length:]
                server.sendall(message)
                if started and message[:1] == b"Q" and b"COMMIT" in message and self.armed.is_set():
                    self.armed.clear()
                    self.cuts += 1
                    cut.set()
                    client.close()  # the server has it; its answer goes nowhere
                    return
                started = True

    def _to_client(
        self, server: socket.socket, client: socket.socket, cut: threading.Event
    ) -> None:
        while (data := _receive(server)) and not cut.is_set():
            try:
                client.sendall(data)
            except OSError:
                break
        time.sleep(0.5)  # let the server finish its answer before it sees the client go
        server.close()

    def url(self, url: str) -> str:
        parts = urlsplit(url)
        netloc = f"{parts.username}@127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc, query="sslmode=disable&gssencmode=disable"))

    def close(self) -> None:
        self.listener.close()


def _receive(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


@pytest.fixture
def proxy(postgres_url: str) -> Iterator[CuttingProxy]:
    cutting = CuttingProxy(urlsplit(postgres_url).port or 5432)
    yield cutting
    cutting.close()


def test_a_connection_cut_during_commit_is_resolved_by_asking_not_by_writing_again(
    postgres_url, proxy, caplog
):
    with PostgresStore(proxy.url(postgres_url)) as store:
        session = new_session(store)
        session.final_answer = "once"
        proxy.armed.set()
        saved = store.save(session)  # committed, though the answer to COMMIT never came
        assert proxy.cuts == 1 and "says it committed" in caplog.text
        assert saved.version == session.version + 1
        assert store.load(session.id).version == session.version + 1
        # A write that is not idempotent at all: one late result, not two.
        proxy.armed.set()
        store.record_late("tok", session.id, "c", ToolResult.ok("late"))
        assert proxy.cuts == 2
        assert [r.content for _, r in store.late_results(session.id)] == ["late"]


def test_a_server_that_cannot_be_reached_is_a_clear_error(postgres_url):
    parts = urlsplit(postgres_url)
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]  # a port nobody listens on once this closes
    unreachable = urlunsplit(parts._replace(netloc=f"postgres@127.0.0.1:{port}"))
    with pytest.raises(
        StoreError, match=f"cannot connect to postgresql://postgres@127.0.0.1:{port}"
    ):
        PostgresStore(unreachable, connect_timeout_s=2)


# --- claims that scale ----------------------------------------------------------------


def test_concurrent_pollers_get_disjoint_sessions(postgres_url, store):
    sessions = {new_session(store, f"p{n}").id for n in range(4)}
    with PostgresStore(postgres_url) as other:
        mine = store.due_sessions(2)
        theirs = other.due_sessions(10)
        assert len(mine) == 2 and set(mine) | set(theirs) == sessions
        assert not set(mine) & set(theirs)
        assert store.due_sessions(10) == mine  # a store sees its own claims again
        # A session whose row another transaction holds is skipped, not waited for.
        with admin(postgres_url) as db:
            db.execute("BEGIN")
            db.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (mine[0],))
            assert store.due_sessions(10) == mine[1:]
            db.execute("ROLLBACK")
        # Once a claimant holds the lease, no one is offered the session.
        lease = store.acquire_lease(mine[0], "me", ttl_s=60)
        assert mine[0] not in store.due_sessions(10)
        store.release_lease(lease)
        assert mine[0] in store.due_sessions(10)


def test_a_notify_wakes_a_waiting_worker(postgres_url, store):
    assert store.wait_for_due(0.05) is False  # nothing announced
    with PostgresStore(postgres_url) as other, ThreadPoolExecutor(1) as pool:
        store.wait_for_due(0)  # listening from now on
        waiting: Future[bool] = pool.submit(store.wait_for_due, 120)
        session = new_session(other)  # created due: announced at commit
        assert waiting.result(timeout=120) is True
        lease = other.acquire_lease(session.id, "w", ttl_s=60)
        assert store.wait_for_due(0) is False
        other.release_lease(lease)  # let go while still due: announced
        assert pool.submit(store.wait_for_due, 120).result(timeout=120) is True
        taken = other.lease_and_load(session.id, "w", ttl_s=60)  # one round trip
        assert taken is not None and store.wait_for_due(0) is False
        other.save_and_release(taken.session, taken.lease)  # its last commit lets go: announced
        assert pool.submit(store.wait_for_due, 120).result(timeout=120) is True


# --- passwords --------------------------------------------------------------------------


def test_a_password_never_shows(postgres_url):
    parts = urlsplit(postgres_url)
    with_password = urlunsplit(
        parts._replace(netloc=f"postgres:s3cr%3At@{parts.hostname}:{parts.port}")
    )
    with open_store(with_password) as opened:  # trust authentication ignores it
        assert "s3cr" not in opened.description and "***" in opened.description
    assert "s3cr" not in open_store(postgres_url + "?password=s3cret").description
    with pytest.raises(StoreError) as refused:
        open_store("postgres://postgres:s3cret@127.0.0.1:1/x?password=s3cret")
    assert "s3cret" not in str(refused.value) and "postgres://postgres:***@127.0.0.1:1/x" in str(
        refused.value
    )
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", "session", "list", "--store",
         "postgresql://me:hunter2@127.0.0.1:1/x"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert (
        done.returncode == 1
        and "cannot connect to postgresql://me:***@127.0.0.1:1/x" in done.stderr
    )
    assert "hunter2" not in done.stderr + done.stdout and "Traceback" not in done.stderr
