"""What the runners of one owner share, each part bounded, none of it module-level.

Whoever builds runners (the session engine, a warm pool's `PooledRunners`, a command)
keeps one `RunnerCaches` and passes its parts to every runner it builds:

- `CapabilityCache`: what describe said, by worker identity (`capability_key()`: an
  image's id, a program's identity), so that runners made per call describe one worker
  once between them, and concurrent first calls (a session with 16 calls at once) wait
  for one describe instead of each asking. The least recently used answers go first.
- `Sweeper`: what dead runner processes left behind (containers, then egress networks)
  is removed before the owner's first container starts; a sweep that could not reach
  the engine is tried again at the next start.
- `EngineRuntimes` (runtimes.py): each engine's registered runtimes, kept a while.

A runner given none of them makes its own: a lone runner behaves as it always did.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
import anyio.to_thread
import docker
import docker.errors
import requests.exceptions

from runner.isolation.containers import sweep
from runner.isolation.egress import sweep_networks
from runner.isolation.runtimes import EngineRuntimes

logger = logging.getLogger(__name__)

#: Workers whose capabilities a CapabilityCache keeps unless told otherwise.
DEFAULT_CAPABILITY_ENTRIES = 256


class SweepFailed(Exception):
    """The first sweep could not reach the engine (it is tried again at the next start)."""


class CapabilityCache:
    """What workers declare (`files`, `events`), by worker identity, for the runners of
    one owner; at most `max_entries` workers (the least recently used are forgotten and
    asked again). Safe from several event loops and threads."""

    def __init__(self, max_entries: int = DEFAULT_CAPABILITY_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"CapabilityCache.max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self._known: OrderedDict[Hashable, frozenset[str]] = OrderedDict()
        #: The describe under way per event loop and worker, with how many calls use it:
        #: the entry goes when the last one leaves, so this holds only calls in flight.
        self._describing: dict[tuple[object, Hashable], tuple[anyio.Lock, int]] = {}
        self._guard = threading.Lock()

    def __len__(self) -> int:
        return len(self._known)

    def get(self, key: Hashable) -> frozenset[str] | None:
        with self._guard:
            found = self._known.get(key)
            if found is not None:
                self._known.move_to_end(key)
            return found

    def put(self, key: Hashable, capabilities: frozenset[str]) -> None:
        with self._guard:
            self._known[key] = capabilities
            self._known.move_to_end(key)
            while len(self._known) > self.max_entries:
                self._known.popitem(last=False)

    @contextlib.asynccontextmanager
    async def describing(self, key: Hashable) -> AsyncIterator[None]:
        """Held while one call describes the worker `key` names: the other calls of this
        event loop that want it wait here, then find the answer with `get`."""
        flight = (anyio.lowlevel.current_token(), key)
        with self._guard:
            lock, users = self._describing.get(flight, (None, 0))
            if lock is None:
                lock = anyio.Lock()
            self._describing[flight] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._describing[flight]
                if users <= 1:
                    del self._describing[flight]
                else:
                    self._describing[flight] = (lock, users - 1)

    def in_flight(self) -> int:
        """Workers being described right now (a bound check for tests)."""
        with self._guard:
            return len(self._describing)


class Sweeper:
    """Removes what dead runner processes left (containers, then egress networks) once,
    before the first container of its owner starts. The first start sweeps; a start
    meanwhile does not wait (a sweep removes only what dead owners left); a sweep that
    could not reach the engine fails that start and is tried again by the next."""

    def __init__(self) -> None:
        self._swept = False

    @property
    def swept(self) -> bool:
        """Whether a sweep has been made (or is under way)."""
        return self._swept

    async def before_first_start(self, api: Callable[[], docker.APIClient]) -> None:
        """Sweep unless done; `api` may negotiate the API version, so it runs in the
        sweep's thread. SweepFailed when the engine cannot be reached."""
        if self._swept:
            return
        self._swept = True
        try:
            await anyio.to_thread.run_sync(lambda: (sweep(api()), sweep_networks(api())))
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            self._swept = False  # try again with the next start
            logger.warning("the first sweep could not reach the engine: %s", exc)
            raise SweepFailed(f"cannot reach the Docker engine: {exc}") from None


@dataclass(frozen=True)
class RunnerCaches:
    """The three, for an owner that builds many runners: pass `capabilities` to every
    runner, `sweeper` and `runtimes` to every DockerRunner."""

    capabilities: CapabilityCache = field(default_factory=CapabilityCache)
    sweeper: Sweeper = field(default_factory=Sweeper)
    runtimes: EngineRuntimes = field(default_factory=EngineRuntimes)
