"""`agents-runner serve`'s HTTP API (agents-exe's server): app.py builds the ASGI app,
routes.py holds the endpoints (events.py the Server-Sent Events, claims.py the claims
for claimers), auth.py the bearer tokens and roles, problems.py the
application/problem+json errors and the body cap."""

from runner.server.app import create_app
from runner.server.auth import AuthError, Grant, load_tokens
from runner.server.events import close_streams

__all__ = ["AuthError", "Grant", "close_streams", "create_app", "load_tokens"]
