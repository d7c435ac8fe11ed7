"""The ASGI app: `create_app(store, agents_dir, tokens, docker_check=...)`. It answers
requests only; `agents-runner serve` runs the worker loop beside it. `docker_check`, when
given, is called by /readyz and raises (saying why) when the Docker engine is unreachable."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI

from runner.server import actions, bodies, claims, events, problems, routes
from runner.server.auth import Authenticate, Grant
from runner.server.routes import Settings
from runner.stores import DurableStore


def create_app(
    store: DurableStore,
    agents_dir: Path | None,
    tokens: list[Grant] | None,
    *,
    docker_check: Callable[[], None] | None = None,
) -> FastAPI:
    app = FastAPI(title="agents-runner", version="1",
                  description="Durable agent sessions over HTTP (agents-exe's server API).",
                  docs_url=None, redoc_url=None)  # fmt: skip
    app.state.settings = Settings(store, agents_dir, tokens, docker_check)
    problems.install(app)
    problems.document(app)
    app.include_router(routes.router)
    app.include_router(actions.router)
    app.include_router(events.router)
    app.include_router(claims.router)
    app.add_middleware(bodies.StrictJson)  # inside BodyCap: added before it
    app.add_middleware(problems.BodyCap)
    app.add_middleware(Authenticate, grants=tokens)  # outermost: before any body is read
    return app
