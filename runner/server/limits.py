"""Caps on what one caller may hold open: Server-Sent-Event streams and claim requests
(long polls), each per token and in total. Beyond a cap the request is answered 429
with Retry-After before the route runs; a slot is held for exactly as long as the
request's ASGI call lasts, so a stream that ends, or a client that goes, frees it.

The per-token count is keyed by the SHA-256 of the Authorization header, before the
route checks it: a request with an unknown token holds its slot only until its 401.
(Connections and the time to read a request's head are capped by uvicorn and
runner.server.protocol, below the app.)"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from runner.server.problems import BODY_TIMEOUT_S, problem_response


@dataclass(frozen=True)
class Limits:
    """`serve`'s options; each cap must be at least 1."""

    event_streams: int = 256
    event_streams_per_token: int = 16
    long_polls: int = 256
    long_polls_per_token: int = 16
    #: What a 429 says in Retry-After (seconds).
    retry_after_s: int = 5
    #: How long a request's body may take to arrive (408 after; runner.server.problems).
    body_timeout_s: float = BODY_TIMEOUT_S

    def __post_init__(self) -> None:
        for name in ("event_streams", "event_streams_per_token", "long_polls",
                     "long_polls_per_token", "retry_after_s"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be at least 1")
        if not self.body_timeout_s > 0:
            raise ValueError("Limits.body_timeout_s must be more than 0")


@dataclass(frozen=True)
class _Kind:
    name: str  # what the 429 calls it
    method: str
    path: re.Pattern[str]
    total_option: str
    token_option: str


_STREAMS = _Kind("event streams", "GET", re.compile(r"^/v1/(events|sessions/[^/]+/events)$"),
                 "--max-event-streams", "--max-event-streams-per-token")  # fmt: skip
_POLLS = _Kind("claim requests", "POST", re.compile(r"^/v1/claims$"),
               "--max-long-polls", "--max-long-polls-per-token")  # fmt: skip


class _Slots:
    def __init__(self, total: int, per_token: int) -> None:
        self.total, self.per_token = total, per_token
        self.held: Counter[str] = Counter()

    def refusal(self, key: str) -> str | None:
        """Why `key` may not take another slot now (None: it may)."""
        if self.held[key] >= self.per_token:
            return f"this token holds {self.held[key]}, its most"
        if self.held.total() >= self.total:
            return f"the server holds {self.held.total()}, its most"
        return None


class StreamLimits:
    """ASGI middleware holding a slot for each event stream and claim request."""

    def __init__(self, app: ASGIApp, limits: Limits | None = None) -> None:
        self.app = app
        self.limits = limits = limits or Limits()
        self._slots = {
            _STREAMS.name: _Slots(limits.event_streams, limits.event_streams_per_token),
            _POLLS.name: _Slots(limits.long_polls, limits.long_polls_per_token),
        }

    def held(self, kind: str) -> int:
        """How many slots of `kind` ("event streams", "claim requests") are held now."""
        return self._slots[kind].held.total()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = _kind_of(scope)
        if kind is None:
            await self.app(scope, receive, send)
            return
        slots = self._slots[kind.name]
        authorization = Headers(scope=scope).get("authorization", "")
        key = hashlib.sha256(authorization.encode("utf-8", "replace")).hexdigest()
        refusal = slots.refusal(key)
        if refusal is not None:
            cap = kind.token_option if refusal.startswith("this token") else kind.total_option
            detail = (f"too many open {kind.name}: {refusal} ({cap}); close one, or retry"
                      f" after {self.limits.retry_after_s} s")  # fmt: skip
            retry = {"Retry-After": str(self.limits.retry_after_s)}
            response = problem_response(429, "too_many_requests", detail, **retry)
            await response(scope, receive, send)
            return
        slots.held[key] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            slots.held[key] -= 1
            if slots.held[key] <= 0:
                del slots.held[key]


def _kind_of(scope: Scope) -> _Kind | None:
    if scope["type"] != "http":
        return None
    return _kind_at(scope["path"], scope["method"])


def _kind_at(path: str, method: str) -> _Kind | None:
    for kind in (_STREAMS, _POLLS):
        if method == kind.method and kind.path.match(path):
            return kind
    return None


def limits_apply(path: str, method: str) -> bool:
    """Whether a request (or an OpenAPI path template) is capped here."""
    return _kind_at(path, method) is not None
