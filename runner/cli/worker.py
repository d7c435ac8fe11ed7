"""`agents-runner worker --store S [--concurrency N]`: a long-running process that
advances due sessions under leases.

It asks the store for sessions that are due (ready calls, detached isolated calls,
retries whose backoff ended, model calls whose backoff ended, deferred calls past their
expiry) and not leased by a live holder, takes each one's lease without waiting, runs
its calls through their runners, commits with its fencing token, and resumes it.
Several workers on one store never advance the same session at once, so no call runs
twice. Between polls it waits for the store to announce due work (PostgreSQL's
LISTEN/NOTIFY; SQLite only sleeps) or for one of its own sessions to finish, and never
longer than --poll-seconds: polling is the fallback. SIGTERM (or SIGINT) drains: it
stops claiming, finishes what it holds (releasing each lease), and exits 0.
With --pool-size N (or AGENTS_RUNNER_POOL_SIZE, or a docker spec's `pool` setting: see
runner/cli/pooling.py), Docker-isolated calls start from warm containers (the warm pool:
started ahead, one call each); a shelf unused for --pool-idle-seconds gives its idle
containers back; all are removed once the drain is done. With --runtime runsc (or
AGENTS_RUNNER_RUNTIME) every Docker-isolated call runs under gVisor, whatever the agent
file says.

A failing model call never keeps a worker busy: the engine stores its budget and next
attempt time in the session, the worker lets go of it while it backs off, and a session
whose budget is spent is `failed`, which is never due. Other errors rest the session,
longer each time they repeat, and are logged with their cause.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import anyio
import anyio.to_thread
import typer

from envelopes import controls
from runner.cli.app import app
from runner.cli.common import (
    DEFAULT_CONCURRENCY,
    DEFAULT_POLL_SECONDS,
    DEFAULT_STORE,
    AuditOption,
    ConcurrencyOption,
    PollSecondsOption,
    PoolIdleOption,
    PoolSizeOption,
    RuntimeOption,
    StoreOption,
    open_store,
)
from runner.cli.settings import WorkerSettings, current
from runner.isolation import sweep_orphans
from runner.session import (
    Engine,
    LeaseBusy,
    default_owner,
)
from runner.session.agent import remember_files
from runner.session.audit import AuditSetting
from runner.session.output import CallOutputBus
from runner.session.runners import runner_factory
from runner.state import Session
from runner.stores import DurableStore

#: Longest single wait for the store's announcements (see `listen`).
LISTEN_SLICE_S = 1.0
#: After an error, a session is left alone this long before the worker tries it again,
#: twice as long after each further error in a row, up to MAX_ERROR_BACKOFF_S.
ERROR_BACKOFF_S = 30.0
MAX_ERROR_BACKOFF_S = 900.0


@app.command("worker")
def worker(
    store: StoreOption = DEFAULT_STORE,
    concurrency: ConcurrencyOption = DEFAULT_CONCURRENCY,
    poll_seconds: PollSecondsOption = DEFAULT_POLL_SECONDS,
    pool_size: PoolSizeOption = None,
    pool_idle_seconds: PoolIdleOption = None,
    runtime: RuntimeOption = None,
    audit: AuditOption = None,
    exit_when_idle: Annotated[
        bool, typer.Option("--exit-when-idle", help="exit once no session is due or running")
    ] = False,
    agents: Annotated[
        Path | None,
        typer.Option(
            "--agents",
            file_okay=False,
            exists=True,
            help="agent files whose env"
            " values this worker gives to isolated calls (the store never holds"
            " them; a call needing values it lacks is left for another process)",
        ),
    ] = None,
) -> None:
    """Advance due sessions until SIGTERM (which drains: finish, release, exit)."""
    if agents is not None:
        log(f"worker: {remember_files(agents)} agent file(s) read from {agents}")
    with open_store(store, "the worker (it shares sessions with other processes)") as durable:
        anyio.run(_serve, durable, concurrency, poll_seconds, exit_when_idle, pool_size,
                  pool_idle_seconds, runtime, audit)  # fmt: skip


async def _serve(store: DurableStore, concurrency: int, poll_s: float, exit_when_idle: bool,
                 pool_size: int | None, pool_idle_s: float | None,
                 runtime: str | None, audit: AuditSetting | None = None) -> None:  # fmt: skip
    stopping = anyio.Event()

    async def on_signals() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                log(f"worker {default_owner()}: draining")
                stopping.set()
                return

    async with anyio.create_task_group() as group:
        group.start_soon(on_signals)
        await advance_sessions(store, concurrency, poll_s, stopping, exit_when_idle,
                               pool_size=pool_size, pool_idle_s=pool_idle_s,
                               runtime=runtime, audit=audit)  # fmt: skip
        group.cancel_scope.cancel()


async def advance_sessions(
    store: DurableStore,
    concurrency: int,
    poll_s: float,
    stopping: anyio.Event,
    exit_when_idle: bool = False,
    *,
    pool_size: int | None = 0,
    pool_idle_s: float | None = None,
    runtime: str | None = None,
    audit: AuditSetting | None = None,
    call_output: CallOutputBus | None = None,
) -> None:
    """Advance due sessions until `stopping` is set (then drain: what is in flight
    finishes and its leases are released) or, with `exit_when_idle`, nothing is due.
    `worker` and `serve` both run this loop; each decides what sets `stopping`.
    Docker-isolated calls come from a warm pool (`pool_size`; None: each docker spec's
    `pool`; 0: none; see runner/cli/pooling.py), closed after the drain, and run under
    `runtime` when one is forced (`--runtime`; None: each docker spec's). The calls'
    live output goes to `call_output` (`serve`'s app listens to it)."""
    # Workers and containers a crashed predecessor left behind (in a thread: /proc, Docker).
    await anyio.to_thread.run_sync(sweep_orphans)
    async with runner_factory(pool_size, pool_idle_s, runtime) as pooled:
        if runtime is not None:
            log(f"Docker-isolated calls run under the runtime {runtime}")
        if pooled is not None and pooled.configured != 0:
            sizes = ("as many as each docker spec's `pool` asks" if pool_size is None
                     else f"{pool_size} container(s) per image")  # fmt: skip
            log(f"warm pool open: {sizes}")
        # `--audit`, else AGENTS_RUNNER_AUDIT...; AGENTS_RUNNER_LEASE_SECONDS
        # (runner/cli/settings.py).
        settings = current(WorkerSettings).agent_settings(audit)
        engine = Engine(store, pooled, settings.audit, owner=default_owner(),
                        lease_s=settings.lease_s, egress_network=settings.egress_network,
                        call_output=call_output)  # fmt: skip
        try:
            await _advance(engine, store, concurrency, poll_s, stopping, exit_when_idle)
        finally:
            if pooled is not None:
                log(f"warm pool: closing ({pooled.pool.idle()} idle,"
                    f" {pooled.pool.starting()} starting)")  # fmt: skip


async def _advance(engine: Engine, store: DurableStore, concurrency: int, poll_s: float,
                   stopping: anyio.Event, exit_when_idle: bool) -> None:  # fmt: skip
    owner = engine.owner
    in_flight: set[str] = set()
    resting: dict[str, float] = {}  # session id -> monotonic time it may be tried again
    errors: dict[str, int] = {}  # session id -> errors in a row
    drained = anyio.Event()  # set once stopping and the last session in flight is done
    wake = anyio.Event()  # work may be due: announced, a slot freed, or stopping

    async def listen() -> None:
        """Wait for the store's announcements in a thread, one short wait at a time: the
        process's exit waits for that thread, so a slice bounds how long a drain takes
        once the last session is done (a slice costs no query: LISTEN waits locally)."""
        while True:
            heard = await anyio.to_thread.run_sync(
                store.wait_for_due, min(poll_s, LISTEN_SLICE_S), abandon_on_cancel=True
            )
            if heard:
                wake.set()

    async def on_stopping() -> None:
        await stopping.wait()
        log(f"worker {owner}: draining ({len(in_flight)} in flight)")
        wake.set()

    async def advance(session_id: str) -> None:
        try:
            report = await engine.work(session_id)  # the agent: from its one load
            errors.pop(session_id, None)
            log(f"session {session_id}: {report.status}, ran {len(report.ran)} call(s)"
                + describe(report.session))  # fmt: skip
        except LeaseBusy:
            pass  # another worker got there first
        except Exception as exc:  # one bad session stops nothing; it is logged and rested
            # Model-call failures never come here (the engine records them in the session
            # and it is not due until its next attempt, or ever once failed): this is
            # something else, so back off further each time it repeats.
            count = errors[session_id] = errors.get(session_id, 0) + 1
            rest = min(ERROR_BACKOFF_S * 2 ** (count - 1), MAX_ERROR_BACKOFF_S)
            resting[session_id] = time.monotonic() + rest
            log(f"session {session_id}: error {count} in a row, {type(exc).__name__}: {exc};"
                f" left alone for {rest:.0f}s")  # fmt: skip
        finally:
            in_flight.discard(session_id)
            wake.set()  # a slot is free
            if stopping.is_set() and not in_flight:
                drained.set()

    async with anyio.create_task_group() as group:
        group.start_soon(on_stopping)
        group.start_soon(listen)
        while not stopping.is_set():
            wake = anyio.Event()  # before polling: what happens meanwhile wakes the pause
            now = time.monotonic()
            skip = in_flight | {s for s, until in resting.items() if until > now}
            due = await anyio.to_thread.run_sync(
                store.due_sessions, concurrency - len(in_flight), skip
            )
            for session_id in due:
                in_flight.add(session_id)
                group.start_soon(advance, session_id)
            if (not due and not in_flight and exit_when_idle
                    and await anyio.to_thread.run_sync(_idle, store, resting)):  # fmt: skip
                break
            with anyio.move_on_after(poll_s):
                await wake.wait()
        # Drain: what is in flight finishes (its leases are released) before we exit.
        await drained.wait() if in_flight else None
        group.cancel_scope.cancel()


def _idle(store: DurableStore, resting: dict[str, float]) -> bool:
    """Nothing running anywhere (another worker may be mid-turn), bar sessions this
    worker already gave up on."""
    return all(row.id in resting for row in store.list("running"))


def describe(session: Session) -> str:
    """What the log line adds for a session that failed or backs off a model call."""
    if session.status == "failed":
        return f"; failed: {session.failure_reason} (`session resume --retry` tries again)"
    if session.llm_next_attempt_ms is not None and session.llm_last_error:
        return (
            f"; model call attempt {session.llm_attempts} failed"
            f" ({session.llm_last_error}), due again at {session.llm_next_attempt_ms}"
        )
    return ""


def log(message: str) -> None:
    """One JSON line on stderr (`serve` and `worker`): a session's failure reason is the
    model's or a worker's words, escaped like every JSON the CLI prints."""
    print(controls.dumps({"ts": round(time.time(), 3), "message": message}), file=sys.stderr)


__all__ = ["advance_sessions", "worker"]
