"""`agents-runner serve --store LOC`: the HTTP API (runner/server) on uvicorn, with the
worker loop in the same process advancing due sessions. SIGTERM (or SIGINT) drains both:
uvicorn finishes the requests it has, the loop finishes the sessions it holds (releasing
their leases), and the process exits 0. With --pool-size N (or AGENTS_RUNNER_POOL_SIZE,
or a docker spec's `pool`: runner/cli/pooling.py), Docker-isolated calls the loop runs
start from warm containers (runner.isolation's WarmPool), all removed on drain.

Access control needs --tokens FILE; without it the server refuses to start unless
--no-auth is given, and then only on a loopback address.
"""

from __future__ import annotations

import contextlib
import ipaddress
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import anyio
import typer
import uvicorn

from runner.cli.app import app, fail
from runner.cli.common import (
    DEFAULT_CONCURRENCY,
    DEFAULT_POLL_SECONDS,
    DEFAULT_STORE,
    ConcurrencyOption,
    PollSecondsOption,
    PoolIdleOption,
    PoolSizeOption,
    StoreOption,
    open_store,
)
from runner.cli.worker import advance_sessions, log
from runner.isolation import check_engine
from runner.server import AuthError, Grant, close_streams, create_app, load_tokens
from runner.session.claims import keep_sweeping_claims
from runner.stores import DurableStore


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: `serve` owns SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@app.command("serve")
def serve(
    store: StoreOption = DEFAULT_STORE,
    host: Annotated[str, typer.Option("--host", help="the address to bind")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, envvar="AGENTS_RUNNER_PORT")
    ] = 8080,
    agents: Annotated[
        Path | None, typer.Option("--agents", help="the agent files POST /v1/sessions names")
    ] = None,
    tokens: Annotated[
        Path | None, typer.Option("--tokens", help="the bearer tokens file (JSON)")
    ] = None,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="no access control (loopback addresses only)")
    ] = False,
    concurrency: ConcurrencyOption = DEFAULT_CONCURRENCY,
    poll_seconds: PollSecondsOption = DEFAULT_POLL_SECONDS,
    pool_size: PoolSizeOption = None,
    pool_idle_seconds: PoolIdleOption = None,
) -> None:
    """Serve the HTTP API and advance due sessions until SIGTERM (which drains)."""
    grants: list[Grant] | None = None
    if tokens is not None:
        try:
            grants = load_tokens(tokens)
        except AuthError as exc:
            fail(f"--tokens: {exc}")
    elif not no_auth:
        fail("--tokens FILE is required (or --no-auth, on a loopback address only)")
    elif not _loopback(host):
        fail(f"--no-auth serves only on a loopback address, not {host!r}")
    if agents is not None and not agents.is_dir():
        fail(f"--agents: {agents} is not a directory")
    with open_store(store, "the server (it advances sessions beside other processes)") as held:
        anyio.run(_run, held, host, port, agents, grants, concurrency, poll_seconds, pool_size,
                  pool_idle_seconds)  # fmt: skip


async def _run(store: DurableStore, host: str, port: int, agents: Path | None,
               grants: list[Grant] | None, concurrency: int, poll_s: float,
               pool_size: int | None, pool_idle_s: float | None) -> None:  # fmt: skip
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
                               pool_idle_s=pool_idle_s)  # fmt: skip
        # uvicorn finishes its own shutdown (open requests, the app's lifespan): cancelling
        # it part way would end the lifespan with a traceback.
        server.should_exit = True
        await served.wait()
        group.cancel_scope.cancel()
    if not server.started:
        fail(f"could not serve on {host}:{port} (see the log above)", 1)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["serve"]
