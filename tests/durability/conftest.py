"""The crash matrix's helpers: an agent whose tool has a countable external effect, and
the real CLI run in a subprocess that a named crash point (AGENTS_RUNNER_CRASH_AT) or the
test itself kills with SIGKILL, on each durable engine (`ws` is parametrized: sqlite,
postgres)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from runner.stores import DurableStore, open_store

WORKER = Path(__file__).resolve().parent / "effect_worker.py"
CLI = [sys.executable, "-m", "runner.cli"]
#: Leases lapse fast where only one process is alive at a time (a killed holder and its
#: successor), so that recovery does not wait long; a lapse there harms nothing.
LEASE_S = "1"
#: Where live processes contend, a lease must not lapse because a loaded machine stalled
#: its holder (SQLite's busy wait blocks renewal): a lapse there would be a takeover.
LONG_LEASE_S = "30"


def wait_for(predicate: Callable[[], object], timeout_s: float = 60.0, what: str = "") -> None:
    """Poll until `predicate()` holds; the bound only catches a hang, it is not a speed test."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not reached in {timeout_s:g}s: {what or predicate}"
        time.sleep(0.02)


def agent_document(log: Path, *, effects: str = "external", sleep_s: float | None = None,
                   calls: int = 1, decorators: list | None = None, tool: str = "charge",
                   spec: dict | None = None, arguments: dict | None = None) -> dict:  # fmt: skip
    """One LLM turn asking for `calls` calls of `tool` (by default run by effect_worker.py),
    then a final answer quoting their results."""
    if spec is None:
        argv = [sys.executable, "-S", str(WORKER), str(log)]
        if sleep_s is not None:
            argv.append(str(sleep_s))
        spec = {"tag": "localProcess", "argv": argv}
    isolated: dict = {"tag": "runIsolated", "spec": spec}
    if decorators:
        isolated = {"tag": "decorate", "decorators": decorators, "inner": isolated}
    ids = [f"c{i}" for i in range(calls)]
    return {
        "slug": "crash",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": i, "name": tool, "arguments": arguments or {"n": i}}
                            for i in ids]},
            {"text": "done " + " ".join(f"{{{{result:{i}}}}}" for i in ids)},
        ]},
        "tools": [{"name": tool, "effects": effects, "parameters": {"type": "object"}}],
        "toolCallPolicyConfig": {"default": isolated},
        "maxConcurrency": 16,
    }  # fmt: skip


class Workspace:
    """One test's directory, store and effect log; `cli`/`popen` run the real CLI on it.

    `kind` is the engine (sqlite, postgres) or "composite": the SQLite file in front of a
    file store, which must fence exactly as the file alone does. `primary` is the durable
    store's location; `location` is what --store says."""

    def __init__(self, root: Path, kind: str = "sqlite", postgres_url: str | None = None) -> None:
        self.root, self.log, self.kind = root, root / "effects.log", kind
        self.engine = "postgres" if kind == "postgres" else "sqlite"
        self.sqlite_file = root / "state.db"
        if kind == "postgres":
            assert postgres_url is not None
            self.primary = postgres_url
        else:
            self.primary = str(self.sqlite_file)
        self.location = (
            f"sqlite:{self.sqlite_file},file:{root / 'files'}" if kind == "composite"
            else self.primary
        )  # fmt: skip
        self._opened: list[DurableStore] = []

    def open_store(self) -> DurableStore:
        """The durable store itself (the primary), closed when the test ends."""
        store = open_store(self.primary)
        assert isinstance(store, DurableStore), store
        self._opened.append(store)
        return store

    def close(self) -> None:
        for store in self._opened:
            store.close()

    def idle(self) -> bool:
        """True when no other process is inside a transaction on the store (so nobody
        waits on a lock it holds): SQLite's write lock is free; no other PostgreSQL
        session of this database is running a statement or idle in a transaction."""
        if self.engine == "sqlite":
            try:
                with closing(sqlite3.connect(self.sqlite_file, timeout=0.5,
                                             isolation_level=None)) as db:  # fmt: skip
                    db.execute("BEGIN IMMEDIATE")
                    db.execute("ROLLBACK")
            except sqlite3.OperationalError:  # locked
                return False
            return True
        with psycopg.connect(self.primary, autocommit=True) as db:
            busy = db.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                " AND state IS DISTINCT FROM 'idle'"
            ).fetchone()
        return busy is not None and busy[0] == 0

    def check_integrity(self) -> None:
        """After a kill: SQLite's file is sound; PostgreSQL rolled the killed process's
        transaction back (no session is left holding locks in it)."""
        if self.engine == "sqlite":
            with closing(sqlite3.connect(self.sqlite_file)) as db:
                assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        else:
            wait_for(self.idle, 60, "the killed process's transaction is rolled back")

    def env(self, crash_at: str | None = None, lease_s: str = LEASE_S,
            barrier: str | None = None) -> dict[str, str]:  # fmt: skip
        env = {**os.environ, "AGENTS_RUNNER_LEASE_SECONDS": lease_s}
        for name, value in (("AGENTS_RUNNER_CRASH_AT", crash_at),
                            ("AGENTS_RUNNER_BARRIER_AT", barrier)):  # fmt: skip
            env.pop(name, None)
            if value:
                env[name] = value
        return env

    def cli(self, *args: str, crash_at: str | None = None, code: int | None = 0,
            lease_s: str = LEASE_S) -> subprocess.CompletedProcess[str]:  # fmt: skip
        done = subprocess.run([*CLI, *args, "--store", self.location], capture_output=True,
                              text=True, cwd=self.root, env=self.env(crash_at, lease_s),
                              timeout=120)  # fmt: skip
        if code is not None:
            assert done.returncode == code, (done.returncode, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def js(self, *args: str, crash_at: str | None = None, lease_s: str = LEASE_S) -> dict:
        return json.loads(self.cli(*args, "--json", crash_at=crash_at, lease_s=lease_s).stdout)

    def start(self, document: dict) -> str:
        path = self.root / "agent.json"
        path.write_text(json.dumps(document))
        return self.js("session", "start", "--agent-file", str(path), "--prompt", "go")[
            "session_id"
        ]

    def effects(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []

    @property
    def started(self) -> Path:
        """Where effect_worker.py (given SECONDS) notes its pid before it sleeps."""
        return self.log.with_name(self.log.name + ".started")

    def popen(self, *args: str, lease_s: str = LEASE_S,
              barrier: str | None = None) -> subprocess.Popen[str]:  # fmt: skip
        return subprocess.Popen([*CLI, *args, "--store", self.location], cwd=self.root,
                                env=self.env(None, lease_s, barrier), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


#: What the `ws` fixture runs on unless a test parametrizes it ("composite" as well).
WORKSPACES = ("sqlite", "postgres")


@pytest.fixture(params=WORKSPACES)
def ws(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Workspace]:
    """A workspace on each engine; parametrize indirectly to choose ("sqlite",
    "composite", "postgres")."""
    kind: str = request.param
    url = request.getfixturevalue("postgres_url") if kind == "postgres" else None
    workspace = Workspace(tmp_path, kind, url)
    try:
        yield workspace
    finally:
        workspace.close()
    if kind == "postgres":  # the CLI really ran on PostgreSQL, not on a default file
        assert not workspace.sqlite_file.exists(), list(tmp_path.iterdir())
