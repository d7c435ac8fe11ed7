"""What `agents-runner serve` runs (runner/cli/serve.py parses its options): uvicorn
serving runner.server's app beside the worker loop and the sweep of lapsed claims, all
drained by SIGTERM or SIGINT. A module of its own so that only `serve` imports the
server's stack."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

import anyio
import uvicorn

from runner.cli.app import fail
from runner.cli.worker import advance_sessions, log
from runner.isolation import check_engine
from runner.server import Grant, close_streams, create_app
from runner.session.claims import keep_sweeping_claims
from runner.stores import DurableStore


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: `serve` owns SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def run_server(store: DurableStore, host: str, port: int, agents: Path | None,
               grants: list[Grant] | None, concurrency: int, poll_s: float,
               pool_size: int | None, pool_idle_s: float | None,
               runtime: str | None = None) -> None:  # fmt: skip
    # With a warm pool the server takes Docker-isolated calls: not ready without Docker.
    app = create_app(store, agents, grants, docker_check=check_engine if pool_size else None)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    server = _Server(config)
    stopping = anyio.Event()

    async def on_signals() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                log(f"serve {host}:{port}: draining")
                close_streams(app)  # uvicorn waits for open event streams otherwise
                server.should_exit = True
                stopping.set()
                return

    served = anyio.Event()

    async def http() -> None:
        try:
            await server.serve()
        finally:
            served.set()
            stopping.set()  # uvicorn stopped on its own (e.g. the port was taken): stop too

    async with anyio.create_task_group() as group:
        group.start_soon(on_signals)
        group.start_soon(http)
        group.start_soon(keep_sweeping_claims, store)  # lapsed claims (runner.session.claims)
        await advance_sessions(store, concurrency, poll_s, stopping, pool_size=pool_size,
                               pool_idle_s=pool_idle_s, runtime=runtime)  # fmt: skip
        # uvicorn finishes its own shutdown (open requests, the app's lifespan): cancelling
        # it part way would end the lifespan with a traceback.
        server.should_exit = True
        await served.wait()
        group.cancel_scope.cancel()
    if not server.started:
        fail(f"could not serve on {host}:{port} (see the log above)", 1)


__all__ = ["run_server"]
