"""`agents-runner serve --store LOC`: the HTTP API (runner/server) on uvicorn, with the
worker loop in the same process advancing due sessions. SIGTERM (or SIGINT) drains both:
uvicorn finishes the requests it has, the loop finishes the sessions it holds (releasing
their leases), and the process exits 0. With --pool-size N (or AGENTS_RUNNER_POOL_SIZE,
or a docker spec's `pool`: runner/cli/pooling.py), Docker-isolated calls the loop runs
start from warm containers (runner.isolation's WarmPool), all removed on drain.

Access control needs --tokens FILE; without it the server refuses to start unless
--no-auth is given, and then only on a loopback address, refusing requests a browser
makes (runner.server.hosts). Whatever the tokens, the Host header must name the server
(loopback names, and each --allowed-host), and agents posted inline are held to
runner.server.inline's rules unless --trust-inline-agents. Start-up errors (a port in
use, a bad tokens file, a store that does not answer) are one line each, exit 2.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import socket
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
    api_keys,
    open_store,
)
from runner.cli.settings import env_name

if TYPE_CHECKING:
    from runner.server import Grant

_LIMITS = "Limits"
_NETWORK = "What the network may ask"

NoAuthOption = Annotated[
    bool,
    typer.Option("--no-auth", help="no access control: only on a loopback address, and"
                 " requests a browser makes (Origin, Sec-Fetch-Site) are refused"),
]  # fmt: skip

AllowedHostOption = Annotated[
    list[str] | None,
    typer.Option("--allowed-host", metavar="NAME", rich_help_panel=_NETWORK,
                 help="a Host the server answers to besides localhost, 127.0.0.1 and"
                 " [::1] (any port; *.DOMAIN for names under DOMAIN), e.g. the name a"
                 " reverse proxy forwards; repeatable. Other Hosts get 421"),
]  # fmt: skip

TrustInlineAgentsOption = Annotated[
    bool,
    typer.Option("--trust-inline-agents", rich_help_panel=_NETWORK,
                 help="let agents posted inline (not from --agents) run localProcess"
                 " workers, use host networks, env, apiKeyEnv and any baseUrl: every"
                 " operator token (every local process with --no-auth) can then run"
                 " commands on this host as this user. For single-user setups only"),
]  # fmt: skip

AllowBaseUrlOption = Annotated[
    list[str] | None,
    typer.Option("--allow-base-url", metavar="URL", rich_help_panel=_NETWORK,
                 help="a model endpoint (provider baseUrl, and the URLs under it) an"
                 " inline agent may use; repeatable"),
]  # fmt: skip

AccessLogOption = Annotated[
    bool, typer.Option("--access-log", help="log one line per request on stderr"
                       " (continuation and claim tokens in paths are masked)"),
]  # fmt: skip

HeaderTimeoutOption = Annotated[
    float,
    typer.Option("--header-timeout", min=0.1, max=3600, metavar="SECONDS",
                 rich_help_panel=_LIMITS, help="close a connection whose request line"
                 " and headers are not all in after this long"),
]  # fmt: skip

BodyTimeoutOption = Annotated[
    float,
    typer.Option("--body-timeout", min=0.1, max=3600, metavar="SECONDS",
                 rich_help_panel=_LIMITS, help="answer 408 and close the connection when a"
                 " request's body has not all arrived this long after its head"),
]  # fmt: skip

MaxHeaderBytesOption = Annotated[
    int,
    typer.Option("--max-header-bytes", min=1024, max=1024 * 1024, rich_help_panel=_LIMITS,
                 help="the largest request head (request line and headers) read"),
]  # fmt: skip

MaxConnectionsOption = Annotated[
    int,
    typer.Option("--max-connections", min=1, rich_help_panel=_LIMITS,
                 help="beyond this many open connections (or requests in progress),"
                 " requests are answered 503"),
]  # fmt: skip

MaxEventStreamsOption = Annotated[
    int, typer.Option("--max-event-streams", min=1, rich_help_panel=_LIMITS,
                      help="open Server-Sent-Event streams in all (429 beyond)"),
]  # fmt: skip

MaxEventStreamsPerTokenOption = Annotated[
    int, typer.Option("--max-event-streams-per-token", min=1, rich_help_panel=_LIMITS,
                      help="open Server-Sent-Event streams per token (429 beyond)"),
]  # fmt: skip

MaxLongPollsOption = Annotated[
    int, typer.Option("--max-long-polls", min=1, rich_help_panel=_LIMITS,
                      help="POST /v1/claims requests in progress in all (429 beyond)"),
]  # fmt: skip

MaxLongPollsPerTokenOption = Annotated[
    int, typer.Option("--max-long-polls-per-token", min=1, rich_help_panel=_LIMITS,
                      help="POST /v1/claims requests in progress per token (429 beyond)"),
]  # fmt: skip


@app.command("serve")
def serve(
    ctx: typer.Context,
    store: StoreOption = DEFAULT_STORE,
    host: Annotated[str, typer.Option("--host", help="the address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, envvar=env_name("port"))] = 8080,
    agents: Annotated[
        Path | None, typer.Option("--agents", help="the agent files POST /v1/sessions names")
    ] = None,
    tokens: Annotated[
        Path | None, typer.Option("--tokens", help="the bearer tokens file (JSON)")
    ] = None,
    no_auth: NoAuthOption = False,
    allowed_host: AllowedHostOption = None,
    trust_inline_agents: TrustInlineAgentsOption = False,
    allow_base_url: AllowBaseUrlOption = None,
    access_log: AccessLogOption = False,
    header_timeout: HeaderTimeoutOption = 10.0,
    body_timeout: BodyTimeoutOption = 30.0,
    max_header_bytes: MaxHeaderBytesOption = 16 * 1024,
    max_connections: MaxConnectionsOption = 512,
    max_event_streams: MaxEventStreamsOption = 256,
    max_event_streams_per_token: MaxEventStreamsPerTokenOption = 16,
    max_long_polls: MaxLongPollsOption = 256,
    max_long_polls_per_token: MaxLongPollsPerTokenOption = 16,
    concurrency: ConcurrencyOption = DEFAULT_CONCURRENCY,
    poll_seconds: PollSecondsOption = DEFAULT_POLL_SECONDS,
    pool_size: PoolSizeOption = None,
    pool_idle_seconds: PoolIdleOption = None,
    runtime: RuntimeOption = None,
) -> None:
    """Serve the HTTP API and advance due sessions until SIGTERM (which drains)."""
    # The server's stack (FastAPI, uvicorn) is imported only by this command.
    from runner.cli.serving import Listening, run_server
    from runner.server import AuthError, load_tokens
    from runner.server.hosts import LOOPBACK_HOSTS, check_host_pattern
    from runner.server.inline import InlineRules
    from runner.server.limits import Limits

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
    hosts = [*LOOPBACK_HOSTS, *_bound_address(host)]
    for name in allowed_host or []:
        try:
            hosts.append(check_host_pattern(name))
        except ValueError as exc:
            fail(f"--allowed-host: {exc}")
    if no_auth and "*" in hosts:
        fail("--allowed-host '*' takes any Host, which --no-auth does not allow (a web page"
             " could then reach the API through DNS rebinding)")  # fmt: skip
    try:
        inline = InlineRules(trust_inline_agents, tuple(allow_base_url or ()))
    except ValueError as exc:
        fail(f"--allow-base-url: {exc}")
    limits = Limits(max_event_streams, max_event_streams_per_token, max_long_polls,
                    max_long_polls_per_token, body_timeout_s=body_timeout)  # fmt: skip
    listening = Listening(_listen(host, port), hosts, header_timeout, max_header_bytes,
                          max_connections, access_log)  # fmt: skip
    with contextlib.ExitStack() as stack:
        stack.callback(listening.socket.close)
        try:
            held = stack.enter_context(open_store(store, "the server (it advances sessions"
                                                  " beside other processes)"))  # fmt: skip
        except typer.Exit as exc:  # said on stderr already; a start-up error is 2
            raise typer.Exit(2 if exc.exit_code else 0) from None
        anyio.run(run_server, held, listening, agents, grants, inline, limits, concurrency,
                  poll_seconds, pool_size, pool_idle_seconds, runtime,
                  api_keys(ctx.obj))  # fmt: skip


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket (as uvicorn binds: IPv6 when the host has a colon), or one
    line and exit 2 (a port in use, a name that does not resolve)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            fail(f"cannot listen on {where}: the address is already in use (another server"
                 " on that port? choose one with --port or AGENTS_RUNNER_PORT)")  # fmt: skip
        fail(f"cannot listen on {where}: {exc.strerror or exc}")
    sock.set_inheritable(True)
    return sock


def _bound_address(host: str) -> list[str]:
    """The address the server binds, as a Host it answers to (none for a wildcard)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return []
    if address.is_unspecified:
        return []
    return [f"[{address}]" if address.version == 6 else str(address)]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["serve"]
