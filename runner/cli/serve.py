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

import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import anyio
import typer

from runner.cli.app import app, fail
from runner.cli.common import (
    DEFAULT_CONCURRENCY,
    DEFAULT_POLL_SECONDS,
    DEFAULT_STORE,
    ConcurrencyOption,
    PollSecondsOption,
    PoolIdleOption,
    PoolSizeOption,
    RuntimeOption,
    StoreOption,
    open_store,
)

if TYPE_CHECKING:
    from runner.server import Grant


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
    runtime: RuntimeOption = None,
) -> None:
    """Serve the HTTP API and advance due sessions until SIGTERM (which drains)."""
    # The server's stack (FastAPI, uvicorn) is imported only by this command.
    from runner.cli.serving import run_server
    from runner.server import AuthError, load_tokens

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
        anyio.run(run_server, held, host, port, agents, grants, concurrency, poll_seconds,
                  pool_size, pool_idle_seconds, runtime)  # fmt: skip


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["serve"]
