"""The session worker as a library class: it advances an Engine's due sessions under
leases until it is shut down, then drains.

    async with Worker(engine, SessionWorkerOptions(concurrency=4)) as worker:
        ...  # e.g. a signal handler calls worker.request_shutdown()
        await worker.run()

It asks the store for sessions that are due and not leased by a live holder, advances
each one through `Engine.work` (which takes its lease without waiting, runs its calls
and commits with its fencing token), at most `concurrency` at once. Between polls it
waits for the store to announce due work (PostgreSQL's LISTEN/NOTIFY; SQLite only
sleeps) or for one of its own sessions to finish, and never longer than `poll_s`:
polling is the fallback. Shutting down drains: it stops claiming, what is in flight
finishes (each lease is released), and `run` returns.

A failing model call never keeps it busy: the engine stores its budget and next attempt
time in the session, which is not due meanwhile. Other errors rest the session, longer
each time they repeat, and are logged with their cause.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

import anyio
import anyio.to_thread

from runner.session.engine import Engine
from runner.session.leases import LeaseBusy
from runner.session.storage import require_durable
from runner.state import SessionTail
from runner.stores import DurableStore

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionWorkerOptions:
    """The session worker's knobs. `concurrency`: sessions advanced at once; `poll_s`:
    the longest wait between polls; `exit_when_idle`: `run` returns once no session is
    due or running anywhere; after an error a session is left alone `error_backoff_s`,
    twice as long after each further error in a row, up to `max_error_backoff_s`;
    `listen_slice_s`: the longest single wait for the store's announcements."""

    concurrency: int = 4
    poll_s: float = 0.5
    exit_when_idle: bool = False
    error_backoff_s: float = 30.0
    max_error_backoff_s: float = 900.0
    listen_slice_s: float = 1.0


class Worker:
    """The *session worker* of docs/glossary.md: the process part that advances due
    sessions (`agents-runner worker`, and `serve` beside its server). Not a "worker" in
    the glossary's own sense, which is the program answering an envelope.

    `engine` must be over a durable store (StoreCapabilityError otherwise); `log`
    receives each line it reports (default: this module's logger at INFO)."""

    def __init__(
        self,
        engine: Engine,
        options: SessionWorkerOptions | None = None,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.engine = engine
        self.store = require_durable(engine.store, "a session worker")
        self.options = options if options is not None else SessionWorkerOptions()
        self._log = log if log is not None else _logger.info
        self._stopping = anyio.Event()
        self._running = False
        self._done = anyio.Event()

    async def __aenter__(self) -> Worker:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.shutdown()

    def request_shutdown(self) -> None:
        """Stop claiming new sessions; `run` returns once those in flight are done."""
        self._stopping.set()

    @property
    def shutting_down(self) -> bool:
        return self._stopping.is_set()

    async def shutdown(self) -> None:
        """Drain: request the shutdown and wait until `run` (if it runs) returned."""
        self.request_shutdown()
        if self._running:
            await self._done.wait()

    async def run(self) -> None:
        """Advance due sessions until shut down (then drain) or, with
        `exit_when_idle`, until nothing is due or running."""
        if self._running:
            raise RuntimeError("this session worker already runs")
        self._running = True
        try:
            await self._advance()
        finally:
            self._running = False
            self._done.set()

    async def _advance(self) -> None:
        engine, store, options, log = self.engine, self.store, self.options, self._log
        stopping = self._stopping
        owner = engine.owner
        in_flight: set[str] = set()
        resting: dict[str, float] = {}  # session id -> monotonic time it may be tried again
        errors: dict[str, int] = {}  # session id -> errors in a row
        drained = anyio.Event()  # set once stopping and the last session in flight is done
        signal = anyio.Event()  # work may be due: announced, a slot freed, or stopping

        async def listen() -> None:
            """Wait for the store's announcements in a thread, one short wait at a time:
            the process's exit waits for that thread, so a slice bounds how long a drain
            takes once the last session is done (a slice costs no query)."""
            while True:
                heard = await anyio.to_thread.run_sync(
                    store.wait_for_due,
                    min(options.poll_s, options.listen_slice_s),
                    abandon_on_cancel=True,
                )
                if heard:
                    signal.set()

        async def on_stopping() -> None:
            await stopping.wait()
            log(f"worker {owner}: draining ({len(in_flight)} in flight)")
            signal.set()

        async def advance(session_id: str) -> None:
            try:
                report = await engine.work(session_id)  # the agent: from its one load
                errors.pop(session_id, None)
                log(f"session {session_id}: {report.status}, ran {len(report.ran)} call(s)"
                    + describe(report.session))  # fmt: skip
            except LeaseBusy:
                pass  # another worker got there first
            except Exception as exc:  # one bad session stops nothing; logged and rested
                # Model-call failures never come here (the engine records them in the
                # session and it is not due until its next attempt, or ever once failed):
                # this is something else, so back off further each time it repeats.
                count = errors[session_id] = errors.get(session_id, 0) + 1
                rest = min(options.error_backoff_s * 2 ** (count - 1),
                           options.max_error_backoff_s)  # fmt: skip
                resting[session_id] = time.monotonic() + rest
                log(f"session {session_id}: error {count} in a row, {type(exc).__name__}:"
                    f" {exc}; left alone for {rest:.0f}s")  # fmt: skip
            finally:
                in_flight.discard(session_id)
                signal.set()  # a slot is free
                if stopping.is_set() and not in_flight:
                    drained.set()

        async with anyio.create_task_group() as group:
            group.start_soon(on_stopping)
            group.start_soon(listen)
            while not stopping.is_set():
                signal = anyio.Event()  # before polling: what happens meanwhile signals the pause
                now = time.monotonic()
                skip = in_flight | {s for s, until in resting.items() if until > now}
                due = await anyio.to_thread.run_sync(
                    store.due_sessions, options.concurrency - len(in_flight), skip
                )
                for session_id in due:
                    in_flight.add(session_id)
                    group.start_soon(advance, session_id)
                if (not due and not in_flight and options.exit_when_idle
                        and await anyio.to_thread.run_sync(_idle, store, resting)):  # fmt: skip
                    break
                with anyio.move_on_after(options.poll_s):
                    await signal.wait()
            # Drain: what is in flight finishes (its leases are released) before we return.
            await drained.wait() if in_flight else None
            group.cancel_scope.cancel()


def _idle(store: DurableStore, resting: dict[str, float]) -> bool:
    """Nothing running anywhere (another worker may be mid-turn), bar sessions this
    worker already gave up on."""
    return all(row.id in resting for row in store.list("running"))


def describe(session: SessionTail) -> str:
    """What the log line adds for a session that failed or backs off a model call."""
    if session.status == "failed":
        return f"; failed: {session.failure_reason} (`session resume --retry` tries again)"
    if session.llm_next_attempt_ms is not None and session.llm_last_error:
        return (
            f"; model call attempt {session.llm_attempts} failed"
            f" ({session.llm_last_error}), due again at {session.llm_next_attempt_ms}"
        )
    return ""


__all__ = ["SessionWorkerOptions", "Worker", "describe"]
