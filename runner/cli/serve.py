"""`agents-runner serve --store LOC`: the HTTP API (runner/server) on uvicorn, with the
worker loop in the same process advancing due sessions. SIGTERM (or SIGINT) drains both:
uvicorn finishes the requests it has, the loop finishes the sessions it holds (releasing
their leases), and the process exits 0.

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
from runner.cli.common import DEFAULT_STORE, StoreOption, open_store
from runner.cli.worker import advance_sessions, log
from runner.server import AuthError, Grant, create_app, load_tokens
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
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8080,
    agents: Annotated[
        Path | None, typer.Option("--agents", help="the agent files POST /v1/sessions names")
    ] = None,
    tokens: Annotated[
        Path | None, typer.Option("--tokens", help="the bearer tokens file (JSON)")
    ] = None,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="no access control (loopback addresses only)")
    ] = False,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, max=256, help="sessions advanced at once")
    ] = 4,
    poll_seconds: Annotated[
        float, typer.Option("--poll-seconds", min=0.01, help="pause when nothing is due")
    ] = 0.5,
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
        anyio.run(_run, held, host, port, agents, grants, concurrency, poll_seconds)


async def _run(store: DurableStore, host: str, port: int, agents: Path | None,
               grants: list[Grant] | None, concurrency: int, poll_s: float) -> None:  # fmt: skip
    config = uvicorn.Config(create_app(store, agents, grants), host=host, port=port,
                            log_level="warning", access_log=False)  # fmt: skip
    server = _Server(config)
    stopping = anyio.Event()

    async def on_signals() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                log(f"serve {host}:{port}: draining")
                server.should_exit = True
                stopping.set()
                return

    async def http() -> None:
        await server.serve()
        stopping.set()  # uvicorn stopped on its own (e.g. the port was taken): stop too

    async with anyio.create_task_group() as group:
        group.start_soon(on_signals)
        group.start_soon(http)
        await advance_sessions(store, concurrency, poll_s, stopping)
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
