"""The ASGI app: `create_app(store, agents_dir, tokens)`. It answers requests only;
`agents-runner serve` runs the worker loop beside it."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from runner.server import problems, routes
from runner.server.auth import Grant
from runner.server.routes import Settings
from runner.stores import DurableStore


def create_app(store: DurableStore, agents_dir: Path | None, tokens: list[Grant] | None) -> FastAPI:
    app = FastAPI(title="agents-runner", version="1",
                  description="Durable agent sessions over HTTP (agents-exe's server API).",
                  docs_url=None, redoc_url=None)  # fmt: skip
    app.state.settings = Settings(store, agents_dir, tokens)
    problems.install(app)
    app.include_router(routes.router)
    app.add_middleware(problems.BodyCap)
    return app
