"""Bearer tokens and roles. The tokens file is JSON: [{"name", "sha256" (the hex SHA-256
of the token), "role": "operator"|"claimer"|"viewer", "tools"?: [...]}]. The server keeps
only the hashes, compares them in constant time, and never logs a token.

operator: everything. viewer: read-only (GET). claimer: the pending calls of a session,
claiming them, and completing or failing the continuations of the tools it is granted,
nothing else. "worker", the claimer role's old name, is still read as "claimer"
(OLD_ROLES), so tokens files written before the rename keep working.
`Authenticate` is the one place a request's grant is decided, before its body is read."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator
from starlette.types import ASGIApp, Receive, Scope, Send

from envelopes import codec
from runner.server.problems import problem_response

Role = Literal["operator", "claimer", "viewer"]
#: Old names of roles, still accepted in a tokens file: {old: current}.
OLD_ROLES: Mapping[str, str] = MappingProxyType({"worker": "claimer"})


class AuthError(ValueError):
    """A tokens file that cannot be used; the message says where and why."""


class Grant(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")
    role: Role
    tools: tuple[str, ...] = ()

    @field_validator("role", mode="before")
    @classmethod
    def _current_role(cls, value: object) -> object:
        return OLD_ROLES.get(value, value) if isinstance(value, str) else value

    def may_use(self, tool: str) -> bool:
        return self.role == "operator" or (self.role == "claimer" and tool in self.tools)


_GRANTS = TypeAdapter(list[Grant])


def load_tokens(path: Path) -> list[Grant]:
    try:
        grants = _GRANTS.validate_json(path.read_bytes())
    except OSError as exc:
        raise AuthError(f"cannot read the tokens file {path}: {exc.strerror}") from exc
    except ValidationError as exc:
        raise AuthError(f"{path}: {codec.describe_validation_error(exc)}") from exc
    names = [g.name for g in grants]
    if len(set(names)) != len(names):
        raise AuthError(f"{path}: token names must be unique")
    return grants


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def identify(grants: list[Grant], authorization: str | None) -> Grant | None:
    """The grant whose hash matches the bearer token, or None. Every grant is compared
    (constant time each), so the time taken says nothing about which one matched."""
    if not authorization or not authorization.lower().startswith("bearer "):
        return None
    offered = hash_token(authorization[7:].strip())
    found: Grant | None = None
    for grant in grants:
        if hmac.compare_digest(offered, grant.sha256.lower()):
            found = grant
    return found


#: The scope key under which Authenticate leaves the caller's grant for the routes.
GRANT_KEY = "agents_runner.grant"


class Authenticate:
    """ASGI middleware, the outermost: who is asking is decided here, before anything
    reads the body. With tokens, a request under /v1/ or carrying a body needs a known
    bearer token; without one it is answered 401 at once and its body is never read,
    buffered or parsed (the HTTP server discards what the client still sends). The
    grant is left in the scope, where the routes' `caller` reads it. `grants` None
    (`serve --no-auth`): no access control."""

    def __init__(self, app: ASGIApp, grants: list[Grant] | None) -> None:
        self.app, self.grants = app, grants

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.grants is None:
            await self.app(scope, receive, send)
            return
        authorization: str | None = None
        body = False
        for name, value in scope["headers"]:
            if name == b"authorization" and authorization is None:
                authorization = value.decode("latin-1")
            elif (name == b"content-length" and value != b"0") or name == b"transfer-encoding":
                body = True
        grant = identify(self.grants, authorization)
        if grant is None and (body or scope["path"].startswith("/v1/")):
            refusal = problem_response(401, "unauthorized", "a valid bearer token is required",
                                       **{"WWW-Authenticate": "Bearer"})  # fmt: skip
            await refusal(scope, receive, send)
            return
        scope[GRANT_KEY] = grant
        await self.app(scope, receive, send)
