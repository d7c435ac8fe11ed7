"""WarmPool: containers created and started ahead of need, each used for one call only.

A cold call pays for create + start (hundreds of ms); a warm one only writes its request
to a container whose worker already waits on stdin. Isolation is unchanged: a pooled
container is taken off its shelf by exactly one call, goes through DockerRunner's own
lifecycle (`DockerRunner.converse`: write, read under caps and the call's deadline,
collect, remove) and is destroyed; a replacement is started in the background.

    async with WarmPool(PoolSettings(size=4)) as pool:
        runner = pool.pooled(DockerRunner("agents-runner/bash-runner:latest"))
        outcome = await runner.call(request)        # safe from many tasks at once

Lifecycle, top to bottom: NEW (built, holds nothing) -> OPEN (`async with` entered: the
pool's task group runs its refills and its recycler) -> CLOSING (the block is left:
background work is cancelled, calls still under way finish, every idle or starting
container is removed, the runners given to `pooled` are closed) -> CLOSED. A pool is
opened once; `pooled` and calls through a pooled runner outside OPEN raise
PoolStateError, which names the state.

Shelves are keyed by image, command and limits, each with its own size (`pooled(runner,
size=N)`; `settings.size` by default). A call that finds its shelf empty waits for a
container already being started that no other call claimed, else starts cold: an empty
pool is never a failure. Idle containers older than `max_idle_s`, or whose worker has
died, are replaced. A shelf no call has taken from for `idle_timeout_s` shrinks to
`min_idle` containers (an idle process holds next to nothing) and grows back to its size
at its next call. A pool left by a crashed process is removed by the sweeper
(containers.py), which also runs before the first container of a process starts: pooled
containers carry the owner token and the role `pool`. One pool serves one event loop.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Hashable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import anyio
import anyio.to_thread
import docker.errors
from anyio.abc import TaskGroup
from requests.exceptions import RequestException

from runner.isolation.base import ExchangeRunner, Runner, RunnerClosed, seconds_until
from runner.isolation.dialect import Dialect
from runner.isolation.docker import DockerRunner, Started, StartFailed
from runner.isolation.events import EventReader
from runner.isolation.negotiation import FileLimits
from runner.isolation.outcome import Exchange
from runner.isolation.sharing import CapabilityCache

logger = logging.getLogger(__name__)

#: The call label of a container that is not yet serving a call.
POOL_LABEL = "warm-pool"
#: What a background start or removal may meet; it pauses a shelf, never ends the pool.
_ENGINE_ERRORS = (StartFailed, docker.errors.DockerException, RequestException, OSError)


class PoolState(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class PoolStateError(RunnerClosed):
    """The pool was used outside its OPEN state (before `async with`, or after it)."""

    def __init__(self, state: PoolState, action: str) -> None:
        hint = {
            PoolState.NEW: "enter it first: `async with WarmPool(...) as pool:`",
            PoolState.OPEN: "a pool is opened once",
            PoolState.CLOSING: "its `async with` block was left; open a new pool",
            PoolState.CLOSED: "its `async with` block was left; open a new pool",
        }[state]
        super().__init__(f"cannot {action}: the WarmPool is {state.value} ({hint})")
        self.state = state


@dataclass(frozen=True)
class PoolSettings:
    #: Idle containers kept ready per image, command and limits.
    size: int = 4
    #: Containers being created at once, across the whole pool.
    refill_concurrency: int = 2
    #: An idle container older than this is replaced by a fresh one.
    max_idle_s: float = 300.0
    #: A shelf no call has used for this long keeps only `min_idle` containers (the
    #: others are removed) until its next call, which refills it to its size.
    idle_timeout_s: float = 180.0
    #: Idle containers a shelf keeps however long it goes unused.
    min_idle: int = 0
    #: After a failed start (a missing image, say), refilling that shelf pauses this long.
    retry_after_s: float = 5.0

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError(f"PoolSettings.size must be 0 or more, got {self.size}")
        if self.refill_concurrency < 1:
            raise ValueError("PoolSettings.refill_concurrency must be at least 1")
        if self.max_idle_s <= 0 or self.retry_after_s < 0:
            raise ValueError("PoolSettings.max_idle_s must be positive, retry_after_s >= 0")
        if self.idle_timeout_s <= 0:
            raise ValueError(
                f"PoolSettings.idle_timeout_s must be positive, got {self.idle_timeout_s}"
            )
        if self.min_idle < 0:
            raise ValueError(f"PoolSettings.min_idle must be 0 or more, got {self.min_idle}")


@dataclass
class _Waiter:
    """A call waiting for a container already being started; None: go cold."""

    ready: anyio.Event = field(default_factory=anyio.Event)
    container: Started | None = None


@dataclass
class _Shelf:
    """The idle containers of one image + command + limits."""

    runner: DockerRunner
    #: Idle containers kept while the shelf is in use.
    size: int
    idle: deque[Started] = field(default_factory=deque)
    starting: int = 0
    waiters: deque[_Waiter] = field(default_factory=deque)
    paused_until: float = 0.0
    #: When a call last took from the shelf (monotonic); its creation counts as a use.
    last_used: float = field(default_factory=time.monotonic)

    def unclaimed_starts(self) -> int:
        return self.starting - len(self.waiters)


class WarmPool:
    def __init__(self, settings: PoolSettings | None = None) -> None:
        self.settings = settings or PoolSettings()
        self._state = PoolState.NEW
        self._shelves: dict[tuple[str, ...], _Shelf] = {}
        #: Every DockerRunner given to `pooled`: the pool closes them on exit.
        self._owned: list[DockerRunner] = []
        self._limiter = anyio.CapacityLimiter(self.settings.refill_concurrency)
        self._tasks: TaskGroup | None = None
        self._exit: contextlib.AsyncExitStack | None = None
        #: Set (and replaced) whenever idle containers, calls under way or the state change.
        self._change = anyio.Event()
        self._calls_under_way = 0

    @property
    def state(self) -> PoolState:
        return self._state

    def pooled(self, runner: Runner, size: int | None = None) -> Runner:
        """`runner` served from this pool, which now owns it (and closes it on exit): a
        DockerRunner gets warm containers, `size` of them kept idle (`settings.size` by
        default; a shelf asked for several sizes keeps the largest); any other runner (a
        local process has nothing to warm) is returned as it is. The pool must be open."""
        self._require_open("serve a runner from it")
        if not isinstance(runner, DockerRunner):
            return runner
        size = self.settings.size if size is None else size
        if size < 0:
            raise ValueError(f"a shelf's size must be 0 or more, got {size}")
        if all(owned is not runner for owned in self._owned):
            self._owned.append(runner)
        key = (runner.image, repr(runner.command), repr(runner.limits))
        shelf = self._shelves.get(key)
        if shelf is None:
            shelf = self._shelves[key] = _Shelf(runner, size)
            logger.info("warm pool: new shelf for %s (size %d)", runner.image, size)
        elif size > shelf.size:
            logger.info("warm pool: shelf for %s grows to %d", runner.image, size)
            shelf.size = size
        self._refill(shelf)
        return PooledRunner(self, shelf, runner.dialect)

    def idle(self) -> int:
        """Idle containers across all shelves."""
        return sum(len(shelf.idle) for shelf in self._shelves.values())

    def starting(self) -> int:
        """Containers being created and started across all shelves."""
        return sum(shelf.starting for shelf in self._shelves.values())

    @property
    def calls_under_way(self) -> int:
        """Calls through this pool's runners that have not returned yet."""
        return self._calls_under_way

    async def filled(self, timeout_s: float = 60.0) -> bool:
        """Wait until every shelf holds as many idle containers as it keeps now (its size;
        `min_idle` once unused for `idle_timeout_s`). False on timeout, or when the pool is
        not open."""
        with anyio.move_on_after(timeout_s):
            while self._state is PoolState.OPEN:
                change = self._change
                if all(len(s.idle) >= self._target(s) for s in self._shelves.values()):
                    return True
                await change.wait()
        return False

    def _target(self, shelf: _Shelf) -> int:
        """How many idle containers the shelf keeps now: its size while in use, at most
        `min_idle` once no call has taken from it for `idle_timeout_s`."""
        if time.monotonic() - shelf.last_used < self.settings.idle_timeout_s:
            return shelf.size
        return min(shelf.size, self.settings.min_idle)

    def _changed(self) -> None:
        self._change.set()
        self._change = anyio.Event()

    def _require_open(self, action: str) -> None:
        if self._state is not PoolState.OPEN:
            raise PoolStateError(self._state, action)

    # --- lifetime ----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state is not PoolState.NEW:
            raise PoolStateError(self._state, "enter the WarmPool again (a pool is opened once)")
        exit_stack = contextlib.AsyncExitStack()
        await exit_stack.enter_async_context(self._lifespan())
        self._exit = exit_stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        exit_stack, self._exit = self._exit, None
        if exit_stack is not None:  # None: already left
            await exit_stack.__aexit__(exc_type, exc, tb)

    @contextlib.asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[None]:
        """The pool's task group, open for as long as the `async with` block runs. What
        the block raises leaves as it is (not in a group): it is held while the
        background work ends and the containers are removed, then raised."""
        raised: BaseException | None = None
        try:
            async with anyio.create_task_group() as tasks:
                self._tasks = tasks
                self._state = PoolState.OPEN
                logger.info("warm pool opened (%s)", self.settings)
                tasks.start_soon(self._recycle_forever)
                try:
                    yield
                except BaseException as exc:
                    raised = exc
                finally:
                    self._state = PoolState.CLOSING
                    self._changed()
                    tasks.cancel_scope.cancel()
        finally:
            self._tasks = None
            with anyio.CancelScope(shield=True):
                await self._close()
        if raised is not None:
            raise raised

    async def _close(self) -> None:
        """Wait for the calls under way, remove every container left, close the runners."""
        for shelf in self._shelves.values():  # calls waiting for a start now go cold
            while self._hand_over(shelf, None):
                pass
        if self._calls_under_way:
            logger.info("warm pool closing: waiting for %d call(s) under way",
                        self._calls_under_way)  # fmt: skip
        while self._calls_under_way:
            await self._change.wait()
        removed = 0
        async with anyio.create_task_group() as removals:
            for shelf in self._shelves.values():
                while shelf.idle:
                    removed += 1
                    removals.start_soon(_discard, shelf.runner, shelf.idle.popleft())
        for runner in self._owned:
            await runner.aclose()
        self._state = PoolState.CLOSED
        self._changed()
        logger.info("warm pool closed: %d idle container(s) removed", removed)

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
        shelf.last_used = time.monotonic()  # in use again: refilled to its full size
        oldest_allowed = shelf.last_used - self.settings.max_idle_s
        taken = None
        while shelf.idle and taken is None:
            candidate = shelf.idle.popleft()
            if candidate.started_at >= oldest_allowed and _worker_waiting(candidate.sock):
                taken = candidate
            else:
                logger.debug("warm pool: container %s is stale or its worker died; replacing"
                             " it", candidate.id[:12])  # fmt: skip
                self.remove_soon(shelf, candidate)
        self._changed()
        self._refill(shelf)
        return taken

    def _refill(self, shelf: _Shelf) -> None:
        if self._tasks is None or not self._open() or time.monotonic() < shelf.paused_until:
            return
        for _ in range(self._target(shelf) - len(shelf.idle) - max(0, shelf.unclaimed_starts())):
            shelf.starting += 1
            self._tasks.start_soon(self._start_one, shelf)

    async def _start_one(self, shelf: _Shelf) -> None:
        try:
            async with self._limiter:
                if not self._open():
                    return
                # Shielded: a container the engine made is either shelved or removed.
                with anyio.CancelScope(shield=True):
                    try:
                        container = await shelf.runner.start_container(POOL_LABEL, role="pool")
                    except _ENGINE_ERRORS as exc:
                        logger.warning("warm pool: cannot start a container of %s (%s);"
                                       " refilling pauses %gs", shelf.runner.image, exc,
                                       self.settings.retry_after_s)  # fmt: skip
                        shelf.paused_until = time.monotonic() + self.settings.retry_after_s
                        self._hand_over(shelf, None)
                        return
                    if not self._open():
                        await _discard(shelf.runner, container)
                        return
                if not self._hand_over(shelf, container):
                    shelf.idle.append(container)
                    self._changed()
        finally:
            shelf.starting -= 1
            self._refill(shelf)

    def _open(self) -> bool:
        return self._state is PoolState.OPEN

    def remove_soon(self, shelf: _Shelf, container: Started) -> None:
        """Remove a used or expired container in the background (the pool must be open);
        the pool's exit waits for every removal it started."""
        if self._tasks is None:
            raise PoolStateError(self._state, "remove a container in the background")
        self._tasks.start_soon(_discard, shelf.runner, container)

    async def release(self, shelf: _Shelf, container: Started) -> None:
        """Remove a container a call has used: off the call's path while the pool is open."""
        if self._open():
            self.remove_soon(shelf, container)
        else:
            await _discard(shelf.runner, container)

    @contextlib.contextmanager
    def _track_call(self) -> Iterator[None]:
        """Count a call through a pooled runner: the pool's exit waits for it."""
        self._require_open("call through a pooled runner")
        self._calls_under_way += 1
        try:
            yield
        finally:
            self._calls_under_way -= 1
            self._changed()

    async def _recycle_forever(self) -> None:
        """Replace idle containers past their age (and dead ones) as they expire, and
        shrink the shelves no call has used for `idle_timeout_s`."""
        shortest = min(self.settings.max_idle_s, self.settings.idle_timeout_s)
        period = min(max(shortest / 4, 0.05), 30.0)
        while True:
            await anyio.sleep(period)
            oldest_allowed = time.monotonic() - self.settings.max_idle_s
            for shelf in self._shelves.values():
                keep = deque(c for c in shelf.idle if c.started_at >= oldest_allowed)
                for container in shelf.idle:
                    if container.started_at < oldest_allowed:
                        logger.debug("warm pool: container %s idled past %gs; replacing it",
                                     container.id[:12], self.settings.max_idle_s)  # fmt: skip
                        self.remove_soon(shelf, container)
                extra = len(keep) - self._target(shelf)
                if extra > 0:  # unused for idle_timeout_s: the oldest go first
                    logger.info("warm pool: shelf for %s unused for %gs; removing %d idle"
                                " container(s)", shelf.runner.image,
                                self.settings.idle_timeout_s, extra)  # fmt: skip
                    for _ in range(extra):
                        self.remove_soon(shelf, keep.popleft())
                if len(keep) != len(shelf.idle):
                    shelf.idle = keep
                    self._changed()
                self._refill(shelf)


class PooledRunner(ExchangeRunner):
    """A DockerRunner whose calls start from a warm container when one is ready. The pool
    owns the DockerRunner; `aclose` closes only this handle (later calls are refused).
    It speaks the envelope of the runner it was made from: a warm container is the same
    whatever its worker's envelope, so runners differing only in that share a shelf."""

    def __init__(self, pool: WarmPool, shelf: _Shelf, dialect: Dialect) -> None:
        self.pool = pool
        self._shelf = shelf
        self._dialect = dialect
        self._closed = False

    @property
    def dialect(self) -> Dialect:
        return self._dialect

    @property
    def docker(self) -> DockerRunner:
        return self._shelf.runner

    async def aclose(self) -> None:
        self._closed = True

    @property
    def file_limits(self) -> FileLimits:  # type: ignore[override]
        return self.docker.file_limits

    @property
    def declared_capabilities(self) -> frozenset[str] | None:  # type: ignore[override]
        return self.docker.declared_capabilities

    async def capability_key(self) -> Hashable | None:
        """The DockerRunner's: a pooled runner knows what a cold one of its image knows."""
        return await self.docker.capability_key()

    def known_capabilities(self) -> CapabilityCache:
        """The DockerRunner's cache too (its own, unless it was given a shared one)."""
        return self.docker.known_capabilities()

    async def exchange(
        self,
        payload: bytes,
        deadline_ms: int,
        stdout_cap: int,
        call_label: str,
        *,
        events: EventReader | None = None,
    ) -> Exchange:
        if self._closed:
            raise RunnerClosed(f"this pooled runner for {self.docker.image!r} is closed")

        async def warm_or_cold() -> Started:
            warm = await self.pool.acquire(self._shelf, deadline_ms)
            if warm is None:
                return await self.docker.start_container(call_label)
            warm.call = call_label
            return warm

        async def release(container: Started) -> None:
            await self.pool.release(self._shelf, container)

        with self.pool._track_call():
            return await self.docker.converse(
                payload, deadline_ms, stdout_cap, warm_or_cold, release=release, events=events
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
    not end the pool (and every call with it): it is logged, and the sweeper removes the
    container later."""
    with anyio.CancelScope(shield=True):
        try:
            await anyio.to_thread.run_sync(runner.discard, container)
        except _ENGINE_ERRORS as exc:
            logger.warning("warm pool: could not remove container %s (call %s): %s; the"
                           " sweeper removes it later", container.id[:12], container.call,
                           exc)  # fmt: skip
