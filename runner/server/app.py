"""The ASGI app: `create_app(store, agents_dir, tokens, docker_check=..., hosts=...,
inline=..., limits=...)`. It answers requests only; `agents-runner serve` runs the
worker loop beside it. `docker_check`, when given, is called by /readyz and raises
(saying why) when the Docker engine is unreachable. `hosts`: the Host names it answers
to (hosts.py; loopback names by default); without tokens it also refuses requests a
browser makes. `inline`: what agents posted inline may do (inline.py); `limits`: the
caps on event streams and claim requests (limits.py); `agents`: the lease length, audit
and egress network of every agent it runs (the server reads no environment variable);
`engine`: the Engine every operation goes through (runner.session.engine), shared with
the session worker that `serve` runs beside the app so that its calls' live output
reaches the event streams (one is made on `store` with `agents` when none is given)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from fastapi import FastAPI

from runner.server import actions, bodies, claims, events, problems, routes
from runner.server.auth import Authenticate, Grant
from runner.server.hosts import LOOPBACK_HOSTS, BrowserCheck, HostCheck
from runner.server.inline import InlineRules
from runner.server.limits import Limits, StreamLimits, limits_apply
from runner.server.routes import Settings
from runner.session import Engine
from runner.session.settings import AgentSettings
from runner.stores import DurableStore


def create_app(
    store: DurableStore,
    agents_dir: Path | None,
    tokens: list[Grant] | None,
    *,
    docker_check: Callable[[], None] | None = None,
    hosts: Sequence[str] = LOOPBACK_HOSTS,
    inline: InlineRules | None = None,
    limits: Limits | None = None,
    agents: AgentSettings | None = None,
    engine: Engine | None = None,
) -> FastAPI:
    app = FastAPI(title="agents-runner", version="1",
                  description="Durable agent sessions over HTTP (agents-exe's server API).",
                  docs_url=None, redoc_url=None)  # fmt: skip
    agents = agents or AgentSettings()
    if engine is None:
        engine = Engine(store, audit=agents.audit, lease_s=agents.lease_s,
                        egress_network=agents.egress_network)  # fmt: skip
    app.state.settings = Settings(store, engine, agents_dir, tokens, docker_check,
                                  inline or InlineRules(), agents)  # fmt: skip
    problems.install(app)
    problems.document(app)
    problems.also_answers(app, 421, lambda path, method: True)  # HostCheck
    problems.also_answers(app, 429, limits_apply)
    app.include_router(routes.router)
    app.include_router(actions.router)
    app.include_router(events.router)
    app.include_router(claims.router)
    app.add_middleware(bodies.StrictJson)  # inside BodyCap: added before it
    app.add_middleware(problems.BodyCap, timeout_s=(limits or Limits()).body_timeout_s)
    app.add_middleware(StreamLimits, limits=limits)
    app.add_middleware(Authenticate, grants=tokens)  # before any body is read
    if tokens is None:  # no token stands between a web page and the API
        app.add_middleware(BrowserCheck)
    app.add_middleware(HostCheck, allowed=hosts)  # added last: the outermost
    return app
