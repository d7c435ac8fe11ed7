"""Removing what a dead runner left running: local worker processes and containers.

A local worker is started in its own process group with `OWNER_ENV` (AGENTS_RUNNER_OWNER)
naming the runner process that owns it (boot id, pid, start time; `owner_environment()`
builds it); a container carries the same owner in its labels (containers.py). When that
runner is SIGKILLed, nothing is left to reap them. `sweep_orphans` kills the process group
of every local worker whose owner is gone and removes its containers. The session engine
runs it when it takes a session over from a dead holder, and a worker daemon when it
starts; `sweep_containers` is the operator's `agents-runner sweep`.

Everything here blocks (/proc reads, the docker SDK): from async code, run it in a thread
(`await anyio.to_thread.run_sync(sweep_orphans)`).
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import docker
import docker.errors
import requests.exceptions

from runner.isolation.containers import SweepReport, my_owner_token, owner_alive, sweep
from runner.isolation.egress import sweep_networks

logger = logging.getLogger(__name__)

#: Set in a local worker's environment: the runner process that owns it.
OWNER_ENV = "AGENTS_RUNNER_OWNER"
_OWNER_PREFIX = f"{OWNER_ENV}=".encode()
#: How long the container sweep waits for the engine before giving up on this sweep.
ENGINE_TIMEOUT_S = 30


class EngineUnavailable(Exception):
    """No Docker engine answered (or it went away mid-sweep); the reason says why."""


def owner_environment() -> dict[str, str]:
    """The variables that mark a local worker as this process's, for the sweep to find:
    merge them into `LocalProcessRunner(env=...)`."""
    return {OWNER_ENV: my_owner_token()}


def sweep_orphans() -> None:
    """Kill orphaned local workers, and remove orphaned containers when an engine answers
    (when none does, its containers wait for the next takeover, worker start, or
    `agents-runner sweep`)."""
    sweep_local_workers()
    try:
        sweep_containers()
    except EngineUnavailable as exc:
        logger.warning("orphan sweep: containers not swept: %s", exc)


def _engine(timeout_s: float) -> docker.APIClient:
    try:
        return docker.APIClient(version="auto", timeout=timeout_s,
                                **docker.utils.kwargs_from_env())  # fmt: skip
    except docker.errors.DockerException as exc:
        raise EngineUnavailable(f"no Docker engine answers: {exc}") from exc


def check_engine(timeout_s: float = 5.0) -> None:
    """EngineUnavailable (saying why) unless the Docker engine answers a ping: what a
    readiness probe asks before a server takes Docker-isolated calls."""
    api = _engine(timeout_s)
    try:
        api.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EngineUnavailable(f"the Docker engine does not answer: {exc}") from exc
    finally:
        api.close()


def sweep_containers(*, everything: bool = False) -> SweepReport:
    """Remove labelled containers whose owner on this machine is gone (with `everything`,
    every labelled container, whoever owns it). Raises EngineUnavailable when no engine
    answers or it goes away mid-sweep: the next sweep removes the rest."""
    api = _engine(ENGINE_TIMEOUT_S)
    try:
        report = sweep(api, everything=everything)
        # Then the egress networks: their proxies were among the containers just removed.
        report.networks.extend(sweep_networks(api, everything=everything))
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EngineUnavailable(f"the Docker engine went away mid-sweep: {exc}") from exc
    finally:
        api.close()
    if report.removed:
        logger.info("orphan sweep: removed %d container(s): %s", len(report.removed),
                    ", ".join(report.removed))  # fmt: skip
    return report


def sweep_local_workers() -> list[int]:
    """Kill orphaned local workers of this user; returns the process groups killed.

    Only workers in this process's PID namespace are judged: an owner token names a pid
    as its own namespace numbers it, so a worker inside a container (seen from the host
    with the container's pids in its token) would look orphaned from outside."""
    killed: list[int] = []
    namespace = _pid_namespace("self")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        if _pid_namespace(proc.name) != namespace:
            continue  # another PID namespace (a container's): its owners are not ours to see
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours to read: not a worker of this user
        owner = next((v[len(_OWNER_PREFIX) :] for v in environ if v.startswith(_OWNER_PREFIX)),
                     None)  # fmt: skip
        if owner is None:
            continue
        token = owner.decode(errors="replace")
        if owner_alive(token):
            continue
        try:
            group = os.getpgid(int(proc.name))
            if group in killed:
                continue
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError) as exc:
            logger.debug("orphan sweep: worker pid %s (owner %s) not killed: %s",
                         proc.name, token, exc)  # fmt: skip
            continue
        killed.append(group)
        logger.info("orphan sweep: killed the process group %d of worker pid %s, whose owner"
                    " %s is gone", group, proc.name, token)  # fmt: skip
    return killed


def _pid_namespace(pid: str) -> str | None:
    """The PID namespace of /proc/PID ("pid:[4026531836]"), or None if unreadable."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
