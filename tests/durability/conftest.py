"""The crash matrix's helpers: an agent whose tool has a countable external effect, and
the real CLI run in a subprocess that a named crash point (AGENTS_RUNNER_CRASH_AT) or the
test itself kills with SIGKILL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

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
    def __init__(self, root: Path, composite: bool = False) -> None:
        self.root, self.store, self.log = root, root / "state.db", root / "effects.log"
        #: What --store says: the SQLite file, or a composite whose primary it is (in
        #: front of a file store), which must fence exactly as the file alone does.
        self.location = (
            f"sqlite:{self.store},file:{root / 'files'}" if composite else str(self.store)
        )

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


@pytest.fixture
def ws(tmp_path, request) -> Workspace:
    """A workspace; parametrize indirectly with "composite" to put the SQLite store in
    front of a file store."""
    return Workspace(tmp_path, composite=getattr(request, "param", None) == "composite")
