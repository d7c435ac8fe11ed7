"""Removing what a dead runner left running: local worker processes and containers.

A local worker is started in its own process group with AGENTS_RUNNER_OWNER naming the
runner process (boot id, pid, start time); a container carries the same owner in its
labels (runner/isolation/containers.py). When that runner is SIGKILLed, nothing is left to
reap them. `sweep_orphans` kills the process group of every local worker whose owner is
gone and removes its containers; it runs when a session is taken over from a dead holder
and when a worker daemon starts.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import docker
import docker.errors
import requests

from runner.isolation.containers import owner_alive, sweep

OWNER_ENV = b"AGENTS_RUNNER_OWNER="
#: How long the container sweep waits for the engine before giving up on this sweep.
ENGINE_TIMEOUT_S = 30


def sweep_orphans() -> None:
    """Kill orphaned local workers, and remove orphaned containers when an engine answers
    (when none does, its containers wait for the next takeover, worker start, or
    `agents-runner sweep`)."""
    sweep_local_workers()
    try:
        api = docker.APIClient(version="auto", timeout=ENGINE_TIMEOUT_S,
                               **docker.utils.kwargs_from_env())  # fmt: skip
    except docker.errors.DockerException:
        return
    try:
        sweep(api)
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        pass  # the engine went away mid-sweep: the next sweep removes the rest
    finally:
        api.close()


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
