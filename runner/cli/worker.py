"""`agents-runner worker --store S [--concurrency N]`: a long-running process that
advances due sessions under leases.

It asks the store for sessions that are due (ready calls, detached isolated calls,
retries whose backoff ended, deferred calls past their expiry) and not leased by a live
holder, takes each one's lease without waiting, runs its calls through their runners,
commits with its fencing token, and resumes it. Several workers on one store never
advance the same session at once, so no call runs twice. SIGTERM (or SIGINT) drains: it
stops claiming, finishes what it holds (releasing each lease), and exits 0.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Annotated

import anyio
import anyio.to_thread
import typer

from runner.cli.app import app
from runner.cli.session import DEFAULT_STORE, StoreOption, open_store
from runner.isolation import sweep_orphans
from runner.session import (
    DurableAgent,
    LeaseBusy,
    default_lease_seconds,
    default_owner,
    parse_agent,
)
from runner.stores import DurableStore

#: After an error, a session is left alone this long before the worker tries it again.
ERROR_BACKOFF_S = 30.0


@app.command("worker")
def worker(
    store: StoreOption = DEFAULT_STORE,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, max=256, help="sessions advanced at once")
    ] = 4,
    poll_seconds: Annotated[
        float, typer.Option("--poll-seconds", min=0.01, help="pause when nothing is due")
    ] = 0.5,
    exit_when_idle: Annotated[
        bool, typer.Option("--exit-when-idle", help="exit once no session is due or running")
    ] = False,
) -> None:
    """Advance due sessions until SIGTERM (which drains: finish, release, exit)."""
    with open_store(store) as durable:
        anyio.run(_serve, durable, concurrency, poll_seconds, exit_when_idle)


async def _serve(
    store: DurableStore, concurrency: int, poll_s: float, exit_when_idle: bool
) -> None:
    owner, lease_s = default_owner(), default_lease_seconds()
    # Workers and containers a crashed predecessor left behind (in a thread: /proc, Docker).
    await anyio.to_thread.run_sync(sweep_orphans)
    in_flight: set[str] = set()
    resting: dict[str, float] = {}  # session id -> monotonic time it may be tried again
    stopping = anyio.Event()
    drained = anyio.Event()  # set once stopping and the last session in flight is done

    async def on_signals() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                log(f"worker {owner}: draining ({len(in_flight)} in flight)")
                stopping.set()
                return

    async def advance(session_id: str) -> None:
        try:
            session = await anyio.to_thread.run_sync(lambda: store.load(session_id, history=False))
            document = await anyio.to_thread.run_sync(store.agent_document, session.agent_hash)
            agent = parse_agent(document, "stored agent").with_mode("asynchronous")
            durable = DurableAgent(agent, store, owner=owner, lease_s=lease_s)
            report = await durable.work(session_id)
            log(f"session {session_id}: {report.status}, ran {len(report.ran)} call(s)")
        except LeaseBusy:
            pass  # another worker got there first
        except Exception as exc:  # one bad session stops nothing; it is logged and rested
            resting[session_id] = time.monotonic() + ERROR_BACKOFF_S
            log(f"session {session_id}: {type(exc).__name__}: {exc}")
        finally:
            in_flight.discard(session_id)
            if stopping.is_set() and not in_flight:
                drained.set()

    async with anyio.create_task_group() as group:
        group.start_soon(on_signals)
        while not stopping.is_set():
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
                await stopping.wait()
        # Drain: what is in flight finishes (its leases are released) before we exit.
        await drained.wait() if in_flight else None
        group.cancel_scope.cancel()


def _idle(store: DurableStore, resting: dict[str, float]) -> bool:
    """Nothing running anywhere (another worker may be mid-turn), bar sessions this
    worker already gave up on."""
    return all(row.id in resting for row in store.list("running"))


def log(message: str) -> None:
    print(json.dumps({"ts": round(time.time(), 3), "message": message}), file=sys.stderr)


__all__ = ["worker"]
