"""The crash matrix's helpers: an agent whose tool has a countable external effect, and
the real CLI run in a subprocess that a named crash point (AGENTS_RUNNER_CRASH_AT) or the
test itself kills with SIGKILL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parent / "effect_worker.py"
CLI = [sys.executable, "-m", "runner.cli"]
#: Leases lapse fast here so that recovery after a kill does not wait long.
LEASE_S = "1"


def agent_document(log: Path, *, effects: str = "external", sleep_s: float | None = None,
                   calls: int = 1, decorators: list | None = None) -> dict:  # fmt: skip
    argv = [sys.executable, "-S", str(WORKER), str(log)]
    if sleep_s is not None:
        argv.append(str(sleep_s))
    isolated: dict = {"tag": "runIsolated", "spec": {"tag": "localProcess", "argv": argv}}
    if decorators:
        isolated = {"tag": "decorate", "decorators": decorators, "inner": isolated}
    ids = [f"c{i}" for i in range(calls)]
    return {
        "slug": "crash",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": i, "name": "charge", "arguments": {"n": i}} for i in ids]},
            {"text": "done " + " ".join(f"{{{{result:{i}}}}}" for i in ids)},
        ]},
        "tools": [{"name": "charge", "effects": effects, "parameters": {"type": "object"}}],
        "toolCallPolicyConfig": {"default": isolated},
        "maxConcurrency": 16,
    }  # fmt: skip


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root, self.store, self.log = root, root / "state.db", root / "effects.log"

    def env(self, crash_at: str | None = None) -> dict[str, str]:
        env = {**os.environ, "AGENTS_RUNNER_LEASE_SECONDS": LEASE_S}
        env.pop("AGENTS_RUNNER_CRASH_AT", None)
        if crash_at:
            env["AGENTS_RUNNER_CRASH_AT"] = crash_at
        return env

    def cli(self, *args: str, crash_at: str | None = None, code: int | None = 0
            ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        done = subprocess.run([*CLI, *args, "--store", str(self.store)], capture_output=True,
                              text=True, cwd=self.root, env=self.env(crash_at),
                              timeout=120)  # fmt: skip
        if code is not None:
            assert done.returncode == code, (done.returncode, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def js(self, *args: str, crash_at: str | None = None) -> dict:
        return json.loads(self.cli(*args, "--json", crash_at=crash_at).stdout)

    def start(self, document: dict) -> str:
        path = self.root / "agent.json"
        path.write_text(json.dumps(document))
        return self.js("session", "start", "--agent-file", str(path), "--prompt", "go")[
            "session_id"
        ]

    def effects(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []

    def popen(self, *args: str, lease_s: str = LEASE_S) -> subprocess.Popen[str]:
        env = {**self.env(), "AGENTS_RUNNER_LEASE_SECONDS": lease_s}
        return subprocess.Popen([*CLI, *args, "--store", str(self.store)], cwd=self.root,
                                env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)  # fmt: skip


@pytest.fixture
def ws(tmp_path) -> Workspace:
    return Workspace(tmp_path)
