"""Many hosts, simulated for real: each worker is a container of agents-runner/worker
(its own hostname, network and PID namespace) on a Docker network made for the test,
with agents-runner/postgres on the same network. No container gets the Docker socket;
isolated calls run with the local-process runner inside the worker containers, where
tests/durability/effect_worker.py (mounted read-only) appends each call's idempotency key
to a file on a directory every host shares, so the test can count effects.

The test process reaches PostgreSQL only through a port published on 127.0.0.1, and
makes and reads sessions there with the same store code the hosts run.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner.session import parse_agent, with_durable_workflows
from runner.stores import DurableStore, open_store

REPO = Path(__file__).resolve().parents[2]
EFFECT_WORKER = REPO / "tests" / "durability" / "effect_worker.py"
WORKER_IMAGE = "agents-runner/worker:latest"
POSTGRES_IMAGE = "agents-runner/postgres:latest"
LABEL = "io.agents-runner.test=multihost"
DATABASE = "runner"
#: Where things are inside the worker containers.
SHARED = "/shared"
EFFECT_WORKER_IN = "/opt/test/effect_worker.py"
PYTHON_IN = "/usr/bin/python3"
#: Short leases, so that a lapse (a killed or cut-off host) is seen quickly.
LEASE_S = 2.0


def docker(*args: str, check: bool = True, timeout: float = 120) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    return done.stdout


def wait_for(
    predicate: Callable[[], object],
    timeout_s: float,
    what: str,
    interval_s: float = 0.2,
    detail: Callable[[], str] | None = None,
) -> None:
    """Poll until `predicate()` holds. The bound catches a hang; it is not a speed test."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            extra = f"\n{detail()}" if detail else ""
            raise AssertionError(f"not reached in {timeout_s:g}s: {what}{extra}")
        time.sleep(interval_s)


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def images() -> None:
    """The two images, rebuilt when the source changed (about a second when it has not),
    so that the hosts run the code under test."""
    done = subprocess.run(
        [str(REPO / "scripts" / "build-images"), "worker", "postgres"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/build-images worker postgres failed:\n{done.stdout}{done.stderr}")


def agent_document(
    *, calls: int = 1, sleep_s: float | None = None, log: str = "effects.log"
) -> dict[str, Any]:
    """One turn asking for `calls` calls of an external-effect tool run inside the hosts
    (appending to LOG in the shared directory), then a final answer quoting their results."""
    argv = [PYTHON_IN, "-S", EFFECT_WORKER_IN, f"{SHARED}/{log}"]
    if sleep_s is not None:
        argv.append(str(sleep_s))
    ids = [f"c{i}" for i in range(calls)]
    return {
        "slug": "multihost",
        "provider": {
            "tag": "scripted",
            "responses": [
                {"tool_calls": [{"id": i, "name": "charge", "arguments": {"n": i}} for i in ids]},
                {"text": "done " + " ".join(f"{{{{result:{i}}}}}" for i in ids)},
            ],
        },
        "tools": [{"name": "charge", "effects": "external", "parameters": {"type": "object"}}],
        "toolCallPolicyConfig": {
            "default": {"tag": "runIsolated", "spec": {"tag": "localProcess", "argv": argv}}
        },
        "maxConcurrency": 16,
    }


@dataclass
class Host:
    name: str  # the container's name
    hostname: str  # what the host calls itself (and what its lease owner starts with)

    def logs(self) -> str:
        done = subprocess.run(
            ["docker", "logs", self.name], capture_output=True, text=True, timeout=60
        )
        return done.stdout + done.stderr

    def log_lines(self) -> list[dict[str, Any]]:
        """The worker's JSON log lines (it also writes plain ones, e.g. warnings)."""
        lines = []
        for line in self.logs().splitlines():
            if line.startswith("{"):
                try:
                    lines.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return lines

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(
            docker("inspect", "--format", "{{json .State}}", self.name)
        )
        return result

    def completed_sessions(self) -> set[str]:
        """The sessions this host's worker says it completed."""
        return {
            line["message"].split()[1].rstrip(":")
            for line in self.log_lines()
            if line["message"].endswith("call(s)") and ": completed," in line["message"]
        }


@dataclass
class Fleet:
    """A Docker network, PostgreSQL on it and worker hosts; removed by the fixture."""

    root: Path
    prefix: str = field(default_factory=lambda: f"armh-{uuid.uuid4().hex[:8]}")
    port: int = field(default_factory=free_loopback_port)
    hosts: list[Host] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)
    network_made: bool = False
    _store: DurableStore | None = None

    @property
    def network(self) -> str:
        return self.prefix

    @property
    def db(self) -> str:
        return f"{self.prefix}-db"

    @property
    def shared(self) -> Path:
        return self.root / "shared"

    @property
    def url(self) -> str:
        """The store as the test process names it: loopback only."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}"

    #: The store as the hosts name it: the database's alias on the test network.
    network_url = f"postgresql://postgres@db:5432/{DATABASE}"

    def start_database(self) -> None:
        self.shared.mkdir(parents=True)
        self.shared.chmod(0o777)  # the hosts' user (10001) appends to it
        docker("network", "create", "--label", LABEL, self.network)
        self.network_made = True
        docker(
            "run",
            "-d",
            "--name",
            self.db,
            "--hostname",
            "db",
            "--network",
            self.network,
            "--network-alias",
            "db",
            "--label",
            LABEL,
            "-p",
            f"127.0.0.1:{self.port}:5432",
            POSTGRES_IMAGE,
        )
        self.containers.append(self.db)
        wait_for(
            self._database_answers,
            60,
            f"PostgreSQL in {self.db} answers on 127.0.0.1:{self.port}",
            detail=lambda: docker("logs", self.db, check=False),
        )
        with psycopg.connect(self._admin_url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{DATABASE}"')

    def _admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _database_answers(self) -> bool:
        try:
            with psycopg.connect(self._admin_url(), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def start_host(
        self,
        *,
        lease_s: float = LEASE_S,
        concurrency: int = 4,
        env: dict[str, str] | None = None,
        command: list[str] | None = None,
    ) -> Host:
        """A worker host: own hostname, network and PID namespace, no Docker socket,
        nothing from the machine but the shared directory and the effect worker."""
        index = len(self.hosts)
        host = Host(name=f"{self.prefix}-h{index}", hostname=f"host{index}")
        settings = {"AGENTS_RUNNER_LEASE_SECONDS": str(lease_s), **(env or {})}
        args = [
            "run",
            "-d",
            "--name",
            host.name,
            "--hostname",
            host.hostname,
            "--network",
            self.network,
            "--label",
            LABEL,
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "-v",
            f"{self.shared}:{SHARED}",
            "-v",
            f"{EFFECT_WORKER}:{EFFECT_WORKER_IN}:ro",
        ]
        for name, value in settings.items():
            args += ["-e", f"{name}={value}"]
        args.append(WORKER_IMAGE)
        args += (
            command
            if command is not None
            else [
                "--store",
                self.network_url,
                "--concurrency",
                str(concurrency),
                "--poll-seconds",
                "0.1",
            ]
        )
        docker(*args)
        self.containers.append(host.name)
        self.hosts.append(host)
        return host

    @property
    def store(self) -> DurableStore:
        """The store, opened from the test process through the loopback port."""
        if self._store is None:
            store = open_store(self.url)
            assert isinstance(store, DurableStore), store
            self._store = store
        return self._store

    def start_sessions(self, document: dict[str, Any], count: int) -> list[str]:
        agent = with_durable_workflows(parse_agent(document), self.store)
        return [agent.start("go").id for _ in range(count)]

    def cli(self, *args: str, timeout: float = 120) -> Any:
        """The CLI from the test process, on the store through the loopback port (--json)."""
        done = subprocess.run(
            [sys.executable, "-m", "runner.cli", *args, "--json", "--store", self.url],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
        )
        assert done.returncode == 0, (args, done.returncode, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        return json.loads(done.stdout)

    def effects(self, log: str = "effects.log") -> list[str]:
        """The idempotency keys effect_worker.py appended to LOG in the shared directory."""
        path = self.shared / log
        return path.read_text().split() if path.exists() else []

    def started(self, log: str = "effects.log") -> list[str]:
        """Pids effect_worker.py noted before sleeping (one line per start of a slow call)."""
        return self.effects(f"{log}.started")

    def unfinished_calls(self, sessions: list[str]) -> list[str]:
        """Calls of these sessions that did not complete on their first attempt, with
        what became of them (a session completes even when a call failed: the scripted
        model's last answer does not depend on the results)."""
        found = []
        for session_id in sessions:
            for call in self.store.load(session_id).calls.values():
                if call.state != "completed" or call.attempts != 1:
                    outcome = call.result or call.last_error
                    found.append(f"{session_id}/{call.id}: {call.state}, attempt"
                                 f" {call.attempts}: {outcome!r}"[:400])  # fmt: skip
        return found

    def statuses(self, sessions: list[str]) -> dict[str, str]:
        return {s: self.store.load(s, history=False).status for s in sessions}

    def holder(self, session_id: str) -> Host | None:
        """The host whose worker holds the session's lease now."""
        lease = self.store.lease(session_id)
        owner = lease.owner if lease is not None else ""
        return next((h for h in self.hosts if owner.startswith(f"{h.hostname}:")), None)

    def diagnostics(self) -> str:
        parts = []
        for host in self.hosts:
            parts.append(f"--- {host.name} ({host.hostname}) ---\n{host.logs()[-3000:]}")
        parts.append(f"--- {self.db} ---\n{docker('logs', self.db, check=False)[-2000:]}")
        return "\n".join(parts)

    def remove(self) -> None:
        if self._store is not None:
            self._store.close()
        if self.containers:
            docker("rm", "-f", "-v", *self.containers, check=False)
        if self.network_made:
            docker("network", "rm", self.network, check=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[FAILED] = report.failed
    return report


FAILED = pytest.StashKey[bool]()


@pytest.fixture
def fleet(images: None, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Fleet]:
    """A network with PostgreSQL on it; the test starts the hosts it wants."""
    made = Fleet(tmp_path)
    try:
        made.start_database()
        yield made
    finally:
        if request.node.stash.get(FAILED, False) and made.containers:
            # What each host and the database said, written past pytest's capture.
            reporter = request.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"\n{request.node.nodeid}: what the containers said")
                reporter.write_line(made.diagnostics())
        made.remove()
