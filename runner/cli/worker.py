"""`agents-runner worker --store S [--concurrency N]`: a long-running process that
advances due sessions under leases (the loop is runner.session.worker's `Worker`; this
command parses its options, builds the Engine and starts it).

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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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
    api_keys,
    open_store,
)
from runner.cli.settings import WorkerSettings, current
from runner.isolation import sweep_orphans
from runner.session import Engine, SessionWorkerOptions, Worker, default_owner
from runner.session.agent import remember_files
from runner.session.audit import AuditSetting
from runner.session.output import CallOutputBus
from runner.session.runners import runner_factory
from runner.session.secrets import Keyring
from runner.stores import DurableStore


@app.command("worker")
def worker(
    ctx: typer.Context,
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
    keyring = Keyring()  # the engine's: the env values of these files, never stored
    if agents is not None:
        read = remember_files(agents, keyring, api_keys(ctx.obj))
        log(f"worker: {read} agent file(s) read from {agents}")
    with open_store(store, "the worker (it shares sessions with other processes)") as durable:
        anyio.run(_serve, durable, concurrency, poll_seconds, exit_when_idle, pool_size,
                  pool_idle_seconds, runtime, audit, keyring)  # fmt: skip


async def _serve(store: DurableStore, concurrency: int, poll_s: float, exit_when_idle: bool,
                 pool_size: int | None, pool_idle_s: float | None, runtime: str | None,
                 audit: AuditSetting | None = None,
                 keyring: Keyring | None = None) -> None:  # fmt: skip
    stopping = anyio.Event()

    async def on_signals() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                log(f"worker {default_owner()}: draining")
                stopping.set()
                return

    options = SessionWorkerOptions(concurrency, poll_s, exit_when_idle)
    async with anyio.create_task_group() as group:
        group.start_soon(on_signals)  # from the start: the warm pool's start-up drains too
        async with (
            open_engine(store, pool_size, pool_idle_s, runtime, audit, keyring=keyring) as engine,
            Worker(engine, options, log=log) as session_worker,
        ):
            group.start_soon(shutdown_when, stopping, session_worker)
            await session_worker.run()
        group.cancel_scope.cancel()


async def shutdown_when(stopping: anyio.Event, session_worker: Worker) -> None:
    """`stopping` (SIGTERM; for `serve`, uvicorn stopping too) drains the session worker."""
    await stopping.wait()
    session_worker.request_shutdown()


@asynccontextmanager
async def open_engine(
    store: DurableStore,
    pool_size: int | None = 0,
    pool_idle_s: float | None = None,
    runtime: str | None = None,
    audit: AuditSetting | None = None,
    call_output: CallOutputBus | None = None,
    keyring: Keyring | None = None,
) -> AsyncIterator[Engine]:
    """The Engine a session worker runs over (`worker`, and `serve` beside its server).
    Docker-isolated calls come from a warm pool (`pool_size`; None: each docker spec's
    `pool`; 0: none; see runner/cli/pooling.py), closed on exit, and run under `runtime`
    when one is forced (`--runtime`; None: each docker spec's). The calls' live output
    goes to `call_output` (the engine's own bus when None: `serve`'s app, built over this
    engine, listens to it); the definitions with secret values it knows are `keyring`'s."""
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
                        call_output=call_output, keyring=keyring)  # fmt: skip
        try:
            yield engine
        finally:
            if pooled is not None:
                log(f"warm pool: closing ({pooled.pool.idle()} idle,"
                    f" {pooled.pool.starting()} starting)")  # fmt: skip


def log(message: str) -> None:
    """One JSON line on stderr (`serve` and `worker`): a session's failure reason is the
    model's or a worker's words, escaped like every JSON the CLI prints."""
    print(controls.dumps({"ts": round(time.time(), 3), "message": message}), file=sys.stderr)


__all__ = ["log", "open_engine", "shutdown_when", "worker"]
