"""Removing local worker processes whose runner died (the Docker sweeper's local twin).

A local worker is started in its own process group with AGENTS_RUNNER_OWNER naming the
runner process (boot id, pid, start time). When that runner is SIGKILLed, nothing is left
to reap the worker; this sweep kills the process group of every worker whose owner is gone.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from runner.isolation.containers import owner_alive

OWNER_ENV = b"AGENTS_RUNNER_OWNER="


def sweep_local_workers() -> list[int]:
    """Kill orphaned local workers of this user; returns the process groups killed."""
    killed: list[int] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours
        owner = next((v[len(OWNER_ENV) :] for v in environ if v.startswith(OWNER_ENV)), None)
        if owner is None or owner_alive(owner.decode(errors="replace")):
            continue
        try:
            group = os.getpgid(int(proc.name))
            os.killpg(group, signal.SIGKILL)
            killed.append(group)
        except (ProcessLookupError, PermissionError):
            continue
    return killed
