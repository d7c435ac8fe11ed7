"""Request bodies read with the envelope's strict JSON rules (envelopes.wire: no duplicate
keys, no NaN or Infinity, integers within +-(2^53-1), no lone surrogates, bounded
nesting, at most wire.MAX_VALUES values, UTF-8, one document), before FastAPI's own
lenient parse sees them. Every body of this API is a JSON object, so the rule holds for
every route, the other modules' included. A body that breaks a rule is answered 400
naming where (`body.result.content: duplicate key 'a'`); one with too many values, 413;
a body that is not JSON at all by its Content-Type, 415. With tokens, only authenticated
requests get here (runner.server.auth.Authenticate answers the others before their body
is read), and a body past INLINE_BYTES is checked in a worker thread, not on the loop."""

from __future__ import annotations

import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envelopes import wire
from runner.server.problems import MAX_BODY_BYTES, problem_response

#: Bodies up to this size are checked on the event loop (a thread costs more than they do).
INLINE_BYTES = 64 * 1024


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
        refusal = None
        if body:
            content_type = dict(scope["headers"]).get(b"content-type")
            if len(body) <= INLINE_BYTES:
                refusal = check(content_type, body)
            else:
                refusal = await anyio.to_thread.run_sync(check, content_type, body)
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
    except wire.WireTooLarge as exc:
        return 413, "body_too_large", f"body: {exc.reason}"
    except wire.WireError as exc:
        if exc.reason.startswith("expected a JSON object"):
            return 422, "invalid_field", f"body: {exc.reason}"
        if exc.path is None:
            return 400, "malformed_json", f"body: the body is not JSON: {exc.reason}"
        where = "body" + exc.path.removeprefix("$")
        return 400, "malformed_json", f"{where}: {exc.problem} (bodies are read as strict JSON)"
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
