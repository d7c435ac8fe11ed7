"""Errors as application/problem+json ({type, title, status, detail}), and the cap on
request bodies: no client mistake reaches the generic 500 handler."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

#: Largest request body the server reads.
MAX_BODY_BYTES = 16 * 1024 * 1024

TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
          405: "Method Not Allowed", 409: "Conflict", 410: "Gone", 413: "Content Too Large",
          415: "Unsupported Media Type", 422: "Unprocessable Content",
          503: "Service Unavailable"}  # fmt: skip


class Problem(Exception):
    """An answer that is not a success; `kind` is the problem's short type name."""

    def __init__(self, status: int, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.kind, self.detail = status, kind, detail


def problem_response(status: int, kind: str, detail: str, **headers: str) -> JSONResponse:
    body = {"type": f"urn:agents-runner:problem:{kind}", "title": TITLES.get(status, kind),
            "status": status, "detail": detail}  # fmt: skip
    return JSONResponse(body, status, headers=headers or None,
                        media_type="application/problem+json")  # fmt: skip


def field_path(location: tuple[Any, ...] | list[Any]) -> str:
    """('body', 'result', 0) -> 'body.result[0]'."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def install(app: FastAPI) -> None:
    """Every error the app can raise answered as problem+json."""

    async def on_problem(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
        return problem_response(exc.status, exc.kind, exc.detail, **headers)

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0]
        if first.get("type") == "json_invalid":
            reason = first.get("ctx", {}).get("error", first["msg"])
            return problem_response(400, "malformed_json", f"the body is not JSON: {reason}")
        where = field_path(first.get("loc", ()))
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        return problem_response(422, "invalid_field", f"{where}: {first['msg']}{more}")

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        return problem_response(exc.status_code, "http", str(exc.detail))

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)


class BodyCap:
    """ASGI middleware: a body larger than `limit` bytes is answered 413 before the app
    sees it (by its Content-Length, or by counting a chunked one)."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(scope, receive, send)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away; the app sees the disconnect
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"the request body is larger than {self.limit} bytes"
        await problem_response(413, "body_too_large", detail)(scope, receive, send)
