"""The engine's OCI runtimes: whether the one a container asks for can run it as asked.

`ContainerLimits.runtime` names a runtime registered with the engine: runc (Docker's
default: the worker shares the host's kernel) or runsc (gVisor: a user-space kernel
between the worker and the host's). A container never falls back to another runtime:
when the engine lacks the one asked for, or has it registered in a way that would drop
a limit without a word, the start fails (WORKER_START_FAILED) saying what to fix.

gVisor as scripts/lib/engine.sh registers it (`ensure_runsc_runtime`) runs with
`--network=none`: a container under it has loopback only, whatever network it joins, so
one that asks for a network is refused. It runs without `--oci-seccomp`: the container's
seccomp profile is not loaded inside the sandbox, where the worker's syscalls reach
gVisor's kernel, not the host's (gVisor filters its own host syscalls). With it, this
gVisor answers every refused syscall with EPERM, ignoring the profile's ENOSYS for clone3,
and glibc's posix_spawn then fails instead of falling back to clone: no worker of our
images could start a child. A call reports the difference: limits.seccomp is "gvisor".
gVisor's own threads on the host (its kernel, its file proxy, a stub per guest thread)
count against the container's pids limit: below GVISOR_MIN_PIDS the sandbox cannot start
(and a start starved part way has been seen to leave a sandbox process behind and the
engine waiting on it), so a lower limit under gVisor is refused before the create.

The engine's list comes from `docker info`, kept by an `EngineRuntimes` (each runner's,
or one its owner shares) for RUNTIMES_TTL_S per engine: runc calls never ask (every
engine has it), and a runsc call asks at most that often.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import docker
import docker.errors
import requests.exceptions

logger = logging.getLogger(__name__)

#: The runtime of an engine that was told nothing else (and of every container before).
DEFAULT_RUNTIME = "runc"
#: How long one engine's `docker info` runtimes are kept.
RUNTIMES_TTL_S = 30.0
#: How scripts/lib/engine.sh registers gVisor (see the module's docstring).
REGISTRATION = (
    '{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}}}'
)
HOW_TO_INSTALL_RUNSC = (
    "install gVisor (Debian: apt-get install runsc) and register it with the engine:"
    " scripts/lib/engine.sh's ensure_runsc_runtime does both (it merges"
    f" {REGISTRATION} into /etc/docker/daemon.json and reloads dockerd with SIGHUP)"
)

#: The lowest pids limit a gVisor container may have (about 60 are needed to start).
GVISOR_MIN_PIDS = 96
#: Engines (by base URL) an EngineRuntimes keeps the list of.
MAX_ENGINES = 16


class RuntimeUnavailable(Exception):
    """The runtime asked for cannot run the container as asked on this engine."""


class EngineRuntimes:
    """Each engine's registered runtimes (`docker info`'s Runtimes: name -> {path,
    runtimeArgs}), by base URL, kept for `ttl_s`, for at most `max_engines` engines.
    Safe from several threads."""

    def __init__(self, ttl_s: float = RUNTIMES_TTL_S, max_engines: int = MAX_ENGINES) -> None:
        if ttl_s < 0 or max_engines < 1:
            raise ValueError("EngineRuntimes: ttl_s must be 0 or more, max_engines at least 1")
        self.ttl_s, self.max_engines = ttl_s, max_engines
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()

    def listed(self, api: docker.APIClient, *, fresh: bool = False) -> dict[str, Any]:
        """The engine's runtimes, asked afresh when `fresh` or once `ttl_s` has passed.
        Blocking."""
        key = str(getattr(api, "base_url", ""))
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and not fresh and time.monotonic() - kept[0] < self.ttl_s:
            return kept[1]
        runtimes = dict(api.info().get("Runtimes") or {})
        self.keep(api, runtimes)
        return runtimes

    def keep(self, api: docker.APIClient, runtimes: Mapping[str, Any]) -> None:
        """Take `runtimes` as the engine's list for `ttl_s` from now."""
        key = str(getattr(api, "base_url", ""))
        with self._lock:
            self._kept[key] = (time.monotonic(), dict(runtimes))
            self._kept.move_to_end(key)
            while len(self._kept) > self.max_engines:
                self._kept.popitem(last=False)


def is_gvisor(entry: Mapping[str, Any]) -> bool:
    return os.path.basename(str(entry.get("path", ""))).startswith("runsc")


def check_runtime(
    api: docker.APIClient, runtime: str, *, network: str, pids: int, known: EngineRuntimes
) -> None:
    """Raise RuntimeUnavailable unless the engine has `runtime` registered so that a
    container on `network` with `pids` processes runs as asked. runc passes unasked;
    the engine's list comes from `known`."""
    if runtime == DEFAULT_RUNTIME:
        return
    try:
        runtimes = known.listed(api)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise RuntimeUnavailable(f"cannot reach the Docker engine: {exc}") from None
    entry = runtimes.get(runtime)
    if entry is None:
        raise RuntimeUnavailable(unknown_runtime(runtime, runtimes))
    if not is_gvisor(entry):
        return
    args = [str(a) for a in entry.get("runtimeArgs") or []]
    if network != "none" and "--network=none" in args:
        raise RuntimeUnavailable(
            f"the runtime {runtime!r} is registered with --network=none: a container under it"
            f" has no network but loopback, so network={network!r} cannot apply (use runc"
            " for a container that needs a network)"
        )
    if pids < GVISOR_MIN_PIDS:
        raise RuntimeUnavailable(
            f"pids={pids} is too low for the runtime {runtime!r}: gVisor's own threads on the"
            f" host count against the limit, and it needs about 60 to start; give at least"
            f" {GVISOR_MIN_PIDS} (or use runc for a tighter limit)"
        )


def unknown_runtime(runtime: str, runtimes: Mapping[str, Any]) -> str:
    """Why the engine cannot start a container of `runtime`, and how to make it able to."""
    have = ", ".join(sorted(runtimes)) or "none listed"
    if runtime == "runsc":
        how = HOW_TO_INSTALL_RUNSC
    else:
        how = (
            f'register {runtime!r} under "runtimes" in the engine\'s /etc/docker/daemon.json'
            " and reload dockerd (kill -HUP), or choose one the engine has"
        )
    return f"the Docker engine has no runtime {runtime!r} (it has: {have}); {how}"


def unknown_runtime_now(api: docker.APIClient, runtime: str, known: EngineRuntimes) -> str:
    """`unknown_runtime` with the engine's list read afresh (after the engine refused)."""
    try:
        return unknown_runtime(runtime, known.listed(api, fresh=True))
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        logger.warning("docker info failed while explaining an unknown runtime: %s", exc)
        return unknown_runtime(runtime, {})
