"""Request bodies read with the envelope's strict JSON rules (envelopes.wire: no duplicate
keys, no NaN or Infinity, integers within +-(2^53-1), no lone surrogates, bounded
nesting, UTF-8, one document), before FastAPI's own lenient parse sees them. Every body
of this API is a JSON object, so the rule holds for every route, the other modules'
included. A body that breaks a rule is answered 400 naming where (`body.result.content:
duplicate key 'a'`); a body that is not JSON at all by its Content-Type, 415."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envelopes import wire
from runner.server.problems import MAX_BODY_BYTES, problem_response


class StrictJson:
    """ASGI middleware: a request with a body must say it is JSON (application/json or
    application/*+json, UTF-8) and hold one strict JSON object. It sits inside BodyCap,
    so the body it reads is already capped and buffered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        more = True
        while more:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break  # the client went away; the app sees the disconnect
            more = message.get("more_body", False)
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        refusal = check(dict(scope["headers"]).get(b"content-type"), body) if body else None
        if refusal is not None:
            status, kind, detail = refusal
            await problem_response(status, kind, detail)(scope, receive, send)
            return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


def check(content_type: bytes | None, body: bytes) -> tuple[int, str, str] | None:
    """Why `body` is refused as (status, kind, detail), or None when it is acceptable."""
    unsupported = media_type_refusal(content_type)
    if unsupported is not None:
        return 415, "unsupported_media_type", unsupported
    if not body.strip():
        return None  # nothing to parse: the route says whether it needs a body
    try:
        wire.loads(body, max_bytes=MAX_BODY_BYTES)
    except wire.WireError as exc:
        if exc.reason.startswith("expected a JSON object"):
            return 422, "invalid_field", f"body: {exc.reason}"
        found = locate(body)
        if found is None:
            return 400, "malformed_json", f"body: the body is not JSON: {exc.reason}"
        where, reason = found
        return 400, "malformed_json", f"{where}: {reason} (bodies are read as strict JSON)"
    return None


def media_type_refusal(content_type: bytes | None) -> str | None:
    if content_type is None:
        return "a request body needs Content-Type: application/json"
    text = content_type.decode("latin-1")
    media, *params = (part.strip() for part in text.split(";"))
    kind, _, subtype = media.lower().partition("/")
    if kind != "application" or not (subtype == "json" or subtype.endswith("+json")):
        return f"the body must be application/json, not {media[:80]!r}"
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() != "utf-8":
            return f"the body must be UTF-8, not charset {value.strip()[:40]!r}"
    return None


@dataclass(frozen=True)
class _Flaw:
    """What a lenient parse found where the strict one refused (its hooks return these)."""

    reason: str
    key: str | None = None  # a duplicate key: the path goes one level into its object


def _pairs(pairs: list[tuple[str, Any]]) -> Any:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            return _Flaw(f"duplicate key {key[:40]!r} in an object", key)
        seen[key] = value
    return seen


def _constant(name: str) -> _Flaw:
    return _Flaw(f"{name} is not valid JSON (non-finite numbers are refused)")


def _int(text: str) -> int | _Flaw:
    if len(text.lstrip("-")) > 16 or abs(int(text)) > wire.MAX_SAFE_INTEGER:
        return _Flaw(f"integer {text[:24]} is outside +-(2^53-1)")
    return int(text)


def _float(text: str) -> float | _Flaw:
    value = float(text)
    return value if math.isfinite(value) else _Flaw(f"number {text[:24]} overflows a double")


_LENIENT = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant,
                            parse_int=_int, parse_float=_float)  # fmt: skip


def locate(body: bytes) -> tuple[str, str] | None:
    """(field path, reason) of the first thing the strict rules refuse in a body that
    still parses leniently; None when it does not (a syntax error has no field)."""
    try:
        value = _LENIENT.decode(body.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[Any, int, str]] = [(value, 1, "body")]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, _Flaw):
            return (f"{path}.{node.key[:40]}" if node.key is not None else path), node.reason
        if isinstance(node, str) and not _encodable(node):
            return path, "a lone surrogate in a string"
        if isinstance(node, dict | list) and depth > wire.MAX_DEPTH:
            return path, f"nesting deeper than {wire.MAX_DEPTH} levels"
        if isinstance(node, dict):
            for key in node:
                if not _encodable(key):
                    return path, "a lone surrogate in a key"
            children = [(child, depth + 1, f"{path}.{key[:40]}") for key, child in node.items()]
        elif isinstance(node, list):
            children = [(child, depth + 1, f"{path}[{i}]") for i, child in enumerate(node)]
        else:
            continue
        stack.extend(reversed(children))  # popped in document order
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
