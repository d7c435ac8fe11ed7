"""What `agents-runner serve` runs (runner/cli/serve.py parses its options): uvicorn
serving runner.server's app beside the session worker (runner.session.Worker) and the
sweep of lapsed claims, all drained by SIGTERM or SIGINT. A module of its own so that
only `serve` imports the server's stack.

uvicorn is given the socket `serve` bound (so a port in use is one line, not a
traceback), the Host names to answer to, and its limits: a deadline for a request's
head (runner.server.protocol), h11's cap on an incomplete head, and `limit_concurrency`
(beyond it uvicorn answers 503). Once it serves, one line says where."""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import uvicorn

from runner.cli.app import fail
from runner.cli.settings import ServeSettings, current
from runner.cli.worker import log, open_engine, shutdown_when
from runner.isolation import check_engine
from runner.llm.keys import ApiKeys
from runner.server import Grant, close_streams, create_app
from runner.server.inline import InlineRules
from runner.server.limits import Limits
from runner.server.protocol import head_timeout_protocol
from runner.session import Engine, SessionWorkerOptions, Worker
from runner.session.claims import keep_sweeping_claims
from runner.stores import DurableStore


@dataclass(frozen=True)
class Listening:
    """Where and how uvicorn serves (serve.py's options)."""

    socket: socket.socket
    hosts: list[str]
    header_timeout_s: float
    max_header_bytes: int
    max_connections: int
    access_log: bool

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


#: Continuation and claim tokens in an access log line's path are capabilities: masked.
_TOKEN_IN_PATH = re.compile(r"(/v1/(?:continuations|claims)/)[^/?\s]+")


class _MaskTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_TOKEN_IN_PATH.sub(r"\1…", a) if isinstance(a, str) else a
                                for a in record.args)  # fmt: skip
        return True


def _access_logging(enabled: bool) -> None:
    access = logging.getLogger("uvicorn.access")
    if not enabled:
        return
    access.setLevel(logging.INFO)
    if not any(isinstance(f, _MaskTokens) for f in access.filters):
        access.addFilter(_MaskTokens())


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: `serve` owns SIGTERM and SIGINT; it
    calls `on_started` once it serves."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.on_started()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def run_server(store: DurableStore, listening: Listening, agents: Path | None,
               grants: list[Grant] | None, inline: InlineRules, limits: Limits,
               concurrency: int, poll_s: float, pool_size: int | None,
               pool_idle_s: float | None, runtime: str | None = None,
               keys: ApiKeys | None = None) -> None:  # fmt: skip
    # One Engine behind the app and its session worker: a call a request runs (`run`,
    # `wait`) comes from the same warm pool, under the same `--runtime`, as one the
    # worker runs, and publishes its live output where the app's streams listen.
    async with open_engine(store, pool_size, pool_idle_s, runtime) as engine:
        await _serve(engine, store, listening, agents, grants, inline, limits, concurrency,
                     poll_s, pool_size, keys)  # fmt: skip


async def _serve(engine: Engine, store: DurableStore, listening: Listening,
                 agents: Path | None, grants: list[Grant] | None, inline: InlineRules,
                 limits: Limits, concurrency: int, poll_s: float, pool_size: int | None,
                 keys: ApiKeys | None) -> None:  # fmt: skip
    settings = replace(current(ServeSettings).agent_settings(),  # AGENTS_RUNNER_LEASE_SECONDS...
                       api_keys=keys)  # fmt: skip
    # With a warm pool the server takes Docker-isolated calls: not ready without Docker.
    app = create_app(store, agents, grants, docker_check=check_engine if pool_size else None,
                     hosts=listening.hosts, inline=inline, limits=limits,
                     agents=settings, engine=engine)  # fmt: skip
    config = uvicorn.Config(
        app, log_level="warning", access_log=listening.access_log,
        http=head_timeout_protocol(listening.header_timeout_s),
        h11_max_incomplete_event_size=listening.max_header_bytes,
        limit_concurrency=listening.max_connections,
    )  # fmt: skip
    _access_logging(listening.access_log)
    url = listening.url
    server = _Server(config, lambda: log(f"serve: listening on {url}"))
    stopping = anyio.Event()

    async def on_signals() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                log(f"serve {url}: draining")
                close_streams(app)  # uvicorn waits for open event streams otherwise
                server.should_exit = True
                stopping.set()
                return

    served = anyio.Event()

    async def http() -> None:
        try:
            await server.serve(sockets=[listening.socket])
        except SystemExit:  # uvicorn's way to fail its start-up (it logged why): said below
            pass
        finally:
            served.set()
            stopping.set()  # uvicorn stopped on its own (e.g. the port was taken): stop too

    async with anyio.create_task_group() as group:
        group.start_soon(on_signals)
        group.start_soon(http)
        group.start_soon(keep_sweeping_claims, store, settings)  # lapsed claims
        session_worker = Worker(engine, SessionWorkerOptions(concurrency, poll_s), log=log)
        async with session_worker:
            group.start_soon(shutdown_when, stopping, session_worker)
            await session_worker.run()
        # uvicorn finishes its own shutdown (open requests, the app's lifespan): cancelling
        # it part way would end the lifespan with a traceback.
        server.should_exit = True
        await served.wait()
        group.cancel_scope.cancel()
    if not server.started:
        fail(f"could not serve on {url} (see the log above)")


__all__ = ["run_server"]
