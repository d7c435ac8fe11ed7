"""WarmPool: containers created and started ahead of need, each used for one call only.

A cold call pays for create + start (hundreds of ms); a warm one only writes its request
to a container whose worker already waits on stdin. Isolation is unchanged: a pooled
container is taken off its shelf by exactly one call, goes through DockerRunner's own
lifecycle (`DockerRunner.converse`: write, read under caps and the call's deadline,
collect, remove) and is destroyed; a replacement is started in the background.

    async with WarmPool(PoolSettings(size=4)) as pool:
        runner = pool.pooled(DockerRunner("agents-runner/bash-runner:latest"))
        outcome = await runner.call(request)        # safe from many tasks at once

Shelves are keyed by image, command and limits. A call that finds its shelf empty waits
for a container already being started that no other call claimed, else starts cold: an
empty pool is never a failure. Idle containers older than `max_idle_s`, or whose worker
has died, are replaced. The pool owns its background work (a task group that lives as
long as the `async with`); on exit every idle or starting container is removed, and a
pool left by a crashed process is removed by the sweeper (containers.py), which also
runs before the first container of a process starts: pooled containers carry the owner
token and the role `pool`. One pool serves one event loop.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import anyio
import anyio.to_thread
import docker.errors
from anyio.abc import TaskGroup
from requests.exceptions import RequestException

from runner.isolation.base import ExchangeRunner, Runner, seconds_until
from runner.isolation.docker import DockerRunner, Started, StartFailed
from runner.isolation.outcome import Exchange

#: The call label of a container that is not yet serving a call.
POOL_LABEL = "warm-pool"
#: What a background start or removal may meet; it pauses a shelf, never ends the pool.
_ENGINE_ERRORS = (StartFailed, docker.errors.DockerException, RequestException, OSError)


@dataclass(frozen=True)
class PoolSettings:
    #: Idle containers kept ready per image, command and limits.
    size: int = 4
    #: Containers being created at once, across the whole pool.
    refill_concurrency: int = 2
    #: An idle container older than this is replaced by a fresh one.
    max_idle_s: float = 300.0
    #: After a failed start (a missing image, say), refilling that shelf pauses this long.
    retry_after_s: float = 5.0

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError(f"PoolSettings.size must be 0 or more, got {self.size}")
        if self.refill_concurrency < 1:
            raise ValueError("PoolSettings.refill_concurrency must be at least 1")
        if self.max_idle_s <= 0 or self.retry_after_s < 0:
            raise ValueError("PoolSettings.max_idle_s must be positive, retry_after_s >= 0")


@dataclass
class _Waiter:
    """A call waiting for a container already being started; None: go cold."""

    ready: anyio.Event = field(default_factory=anyio.Event)
    container: Started | None = None


@dataclass
class _Shelf:
    """The idle containers of one image + command + limits."""

    runner: DockerRunner
    idle: deque[Started] = field(default_factory=deque)
    starting: int = 0
    waiters: deque[_Waiter] = field(default_factory=deque)
    paused_until: float = 0.0

    def unclaimed_starts(self) -> int:
        return self.starting - len(self.waiters)


class WarmPool:
    def __init__(self, settings: PoolSettings | None = None) -> None:
        self.settings = settings or PoolSettings()
        self._shelves: dict[tuple[str, ...], _Shelf] = {}
        self._limiter = anyio.CapacityLimiter(self.settings.refill_concurrency)
        self._tasks: TaskGroup | None = None
        self._closed = False

    def pooled(self, runner: Runner) -> Runner:
        """`runner` served from this pool: a DockerRunner gets warm containers; any other
        runner (a local process has nothing to warm) is returned as it is."""
        if not isinstance(runner, DockerRunner):
            return runner
        key = (runner.image, repr(runner.command), repr(runner.limits))
        shelf = self._shelves.get(key)
        if shelf is None:
            shelf = self._shelves[key] = _Shelf(runner)
            self._refill(shelf)
        return PooledRunner(self, shelf)

    def idle(self) -> int:
        """Idle containers across all shelves."""
        return sum(len(shelf.idle) for shelf in self._shelves.values())

    async def filled(self, timeout_s: float = 60.0) -> bool:
        """Wait until every shelf holds `size` idle containers (False on timeout)."""
        with anyio.move_on_after(timeout_s):
            while any(len(s.idle) < self.settings.size for s in self._shelves.values()):
                await anyio.sleep(0.02)
            return True
        return False

    # --- lifetime ----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tasks is not None or self._closed:
            raise RuntimeError("a WarmPool can be entered once")
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self._recycle_forever)
        for shelf in self._shelves.values():
            self._refill(shelf)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closed = True
        assert self._tasks is not None
        self._tasks.cancel_scope.cancel()
        try:
            await self._tasks.__aexit__(None, None, None)
        finally:
            # Starts under way finish shielded and see `_closed`: they remove their own.
            with anyio.CancelScope(shield=True):
                async with anyio.create_task_group() as removals:
                    for shelf in self._shelves.values():
                        while self._hand_over(shelf, None):
                            pass
                        while shelf.idle:
                            removals.start_soon(_discard, shelf.runner, shelf.idle.popleft())

    # --- taking and refilling ----------------------------------------------------------

    async def acquire(self, shelf: _Shelf, deadline_ms: int) -> Started | None:
        """A container for one call: an idle one, else one already being started that no
        other call is waiting for (it keeps the engine's load at `refill_concurrency`
        where cold starts would pile up), else None: the call starts cold."""
        taken = self.take(shelf)
        if taken is not None or not self._open() or shelf.unclaimed_starts() <= 0:
            return taken
        waiter = _Waiter()
        shelf.waiters.append(waiter)
        self._refill(shelf)
        try:
            with anyio.move_on_after(max(0.0, seconds_until(deadline_ms))):
                await waiter.ready.wait()
        except BaseException:  # cancelled: what was handed over is still removed
            await self._forget(shelf, waiter)
            raise
        if not waiter.ready.is_set():  # the deadline came first: the call will say so
            await self._forget(shelf, waiter)
        return waiter.container

    async def _forget(self, shelf: _Shelf, waiter: _Waiter) -> None:
        if waiter in shelf.waiters:
            shelf.waiters.remove(waiter)
        if waiter.container is not None:
            await self.release(shelf, waiter.container)
            waiter.container = None

    def _hand_over(self, shelf: _Shelf, container: Started | None) -> bool:
        """Give a started container (None after a failure) to the first waiting call."""
        if not shelf.waiters:
            return False
        waiter = shelf.waiters.popleft()
        waiter.container = container
        waiter.ready.set()
        return True

    def take(self, shelf: _Shelf) -> Started | None:
        """A live idle container for one call, or None."""
        if not self._open():
            return None
        oldest_allowed = time.monotonic() - self.settings.max_idle_s
        taken = None
        while shelf.idle and taken is None:
            candidate = shelf.idle.popleft()
            if candidate.started_at >= oldest_allowed and _worker_waiting(candidate.sock):
                taken = candidate
            else:
                self.remove_soon(shelf, candidate)
        self._refill(shelf)
        return taken

    def _refill(self, shelf: _Shelf) -> None:
        if not self._open() or time.monotonic() < shelf.paused_until:
            return
        assert self._tasks is not None
        for _ in range(self.settings.size - len(shelf.idle) - max(0, shelf.unclaimed_starts())):
            shelf.starting += 1
            self._tasks.start_soon(self._start_one, shelf)

    async def _start_one(self, shelf: _Shelf) -> None:
        try:
            async with self._limiter:
                if self._closed:
                    return
                # Shielded: a container the engine made is either shelved or removed.
                with anyio.CancelScope(shield=True):
                    try:
                        container = await shelf.runner.start_container(POOL_LABEL, role="pool")
                    except _ENGINE_ERRORS:
                        shelf.paused_until = time.monotonic() + self.settings.retry_after_s
                        self._hand_over(shelf, None)
                        return
                    if self._closed:
                        await _discard(shelf.runner, container)
                        return
                if not self._hand_over(shelf, container):
                    shelf.idle.append(container)
        finally:
            shelf.starting -= 1
            self._refill(shelf)

    def _open(self) -> bool:
        return self._tasks is not None and not self._closed

    def remove_soon(self, shelf: _Shelf, container: Started) -> None:
        """Remove a used or expired container in the background (the pool must be open);
        the pool's exit waits for every removal it started."""
        assert self._tasks is not None and not self._closed
        self._tasks.start_soon(_discard, shelf.runner, container)

    async def release(self, shelf: _Shelf, container: Started) -> None:
        """Remove a container a call has used: off the call's path while the pool is open."""
        if self._open():
            self.remove_soon(shelf, container)
        else:
            await _discard(shelf.runner, container)

    async def _recycle_forever(self) -> None:
        """Replace idle containers past their age (and dead ones) as they expire."""
        period = min(max(self.settings.max_idle_s / 4, 0.05), 30.0)
        while True:
            await anyio.sleep(period)
            oldest_allowed = time.monotonic() - self.settings.max_idle_s
            for shelf in self._shelves.values():
                keep = deque(c for c in shelf.idle if c.started_at >= oldest_allowed)
                for container in shelf.idle:
                    if container.started_at < oldest_allowed:
                        self.remove_soon(shelf, container)
                shelf.idle = keep
                self._refill(shelf)


class PooledRunner(ExchangeRunner):
    """A DockerRunner whose calls start from a warm container when one is ready."""

    def __init__(self, pool: WarmPool, shelf: _Shelf) -> None:
        self.pool = pool
        self._shelf = shelf

    @property
    def docker(self) -> DockerRunner:
        return self._shelf.runner

    async def exchange(
        self, payload: bytes, deadline_ms: int, stdout_cap: int, call_label: str
    ) -> Exchange:
        async def warm_or_cold() -> Started:
            warm = await self.pool.acquire(self._shelf, deadline_ms)
            return warm if warm is not None else await self.docker.start_container(call_label)

        async def release(container: Started) -> None:
            await self.pool.release(self._shelf, container)

        return await self.docker.converse(
            payload, deadline_ms, stdout_cap, warm_or_cold, release=release
        )


def _worker_waiting(sock: socket.socket) -> bool:
    """Whether the container's streams are still open (a dead worker's read EOF)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True  # nothing to read: the worker is waiting on stdin, as it should
    except OSError:
        return False


async def _discard(runner: DockerRunner, container: Started) -> None:
    """Remove a container in the background. Should the engine fail to, the error must
    not end the pool (and every call with it): the sweeper removes it later."""
    with anyio.CancelScope(shield=True), contextlib.suppress(*_ENGINE_ERRORS):
        await anyio.to_thread.run_sync(runner.discard, container)
