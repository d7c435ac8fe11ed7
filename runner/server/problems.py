"""Errors as application/problem+json ({type, title, status, detail}) that are also
agents-server's error bodies ({"error": "<code>", "message": "<text>"}, as extension
members of the same object: `ERROR_CODES` maps our kinds to its codes), the cap on
request bodies, and the OpenAPI entries of those answers: no client mistake reaches the
generic 500 handler, and every answer is in the document."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

#: Largest request body the server reads.
MAX_BODY_BYTES = 16 * 1024 * 1024
#: How long a request's body may take to arrive in full, from the end of its head.
BODY_TIMEOUT_S = 30.0
PROBLEM_JSON = "application/problem+json"

TITLES: Mapping[int, str] = MappingProxyType(
    {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
     405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict", 410: "Gone",
     413: "Content Too Large", 415: "Unsupported Media Type", 421: "Misdirected Request",
     422: "Unprocessable Content", 429: "Too Many Requests", 503: "Service Unavailable"}
)  # fmt: skip


#: Our problem kinds whose agents-server code differs (any other kind is its own code):
#: a client written for agents-server matches on `error`, ours on `type`.
ERROR_CODES: Mapping[str, str] = MappingProxyType({
    "invalid_field": "bad_request", "malformed_json": "bad_request", "invalid": "bad_request",
    "invalid_attachment": "bad_request", "unsupported_media_type": "bad_request",
    "missing_host": "bad_request", "body_too_large": "payload_too_large",
    "browser_refused": "forbidden_origin", "inline_agent_refused": "forbidden",
})  # fmt: skip
#: What an `http` problem (starlette's own 404 and 405) is called by agents-server.
HTTP_CODES: Mapping[int, str] = MappingProxyType({404: "not_found", 405: "method_not_allowed"})


def error_code(status: int, kind: str) -> str:
    """agents-server's `error` code of a problem of `kind` answered with `status`."""
    if kind == "http":
        return HTTP_CODES.get(status, "bad_request" if status < 500 else "internal_error")
    return ERROR_CODES.get(kind, kind)


class Problem(Exception):
    """An answer that is not a success; `kind` is the problem's short type name."""

    def __init__(self, status: int, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.kind, self.detail = status, kind, detail


def problem_response(status: int, kind: str, detail: str, **headers: str) -> JSONResponse:
    body = {"type": f"urn:agents-runner:problem:{kind}", "title": TITLES.get(status, kind),
            "status": status, "detail": detail, "error": error_code(status, kind),
            "message": detail}  # fmt: skip
    return JSONResponse(body, status, headers=headers or None,
                        media_type=PROBLEM_JSON)  # fmt: skip


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
    sees it (by its Content-Length, or by counting a chunked one), and one that has not
    arrived in full within `timeout_s` is answered 408 and its connection closed (a
    client trickling a body would otherwise hold a connection for as long as it likes;
    runner.server.protocol bounds the head the same way)."""

    def __init__(
        self, app: ASGIApp, limit: int = MAX_BODY_BYTES, timeout_s: float = BODY_TIMEOUT_S
    ) -> None:
        self.app, self.limit, self.timeout_s = app, limit, timeout_s

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
        with anyio.move_on_after(self.timeout_s):
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
        if more:
            detail = (f"the request body did not arrive in full within {self.timeout_s:g} s"
                      f" ({size} bytes came; --body-timeout)")  # fmt: skip
            log.info("%s %s: %s", scope.get("method"), scope.get("path"), detail)
            await problem_response(408, "body_timeout", detail, Connection="close")(
                scope, receive, send
            )
            return
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


# --- the OpenAPI document --------------------------------------------------------------

PROBLEM_REF = "#/components/schemas/Problem"


def problem_schema() -> dict[str, Any]:
    """The Problem schema of the OpenAPI document (a new dict each time: the document owns it)."""
    return {
        "title": "Problem",
        "description": "An error (RFC 9457); `detail` names the field path when a field is wrong.",
        "type": "object",
        "properties": {
            "type": {"type": "string", "description": "urn:agents-runner:problem:<kind>"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "error": {"type": "string", "description": "agents-server's error code"},
            "message": {"type": "string", "description": "agents-server's name for `detail`"},
        },
        "required": ["type", "title", "status", "detail", "error", "message"],
    }


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """Problem answers for a route's `responses=`: the ones its own code gives (404,
    409, 410, ...). What every route can answer is added by `document`."""
    return {status: {"description": TITLES[status],
                     "content": {PROBLEM_JSON: {"schema": {"$ref": PROBLEM_REF}}}}
            for status in statuses}  # fmt: skip


#: Answered before a route's own code runs: auth and the store for the API under /v1,
#: the body's cap, deadline and strict JSON for a route that takes one, validation for
#: parameters.
_API_WIDE = (401, 403, 503)
_WITH_BODY = (400, 408, 413, 415, 422)


def document(app: FastAPI) -> None:
    """Make `app.openapi()` list the app-wide answers of every operation as problems
    (replacing FastAPI's own 422 schema, which this app never sends) and the bearer
    scheme, so a fuzzer can hold every answer to the document."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = generate()
        for path, item in schema.get("paths", {}).items():
            for operation in item.values():
                _complete(path, operation)
        components = schema.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        schemas["Problem"] = problem_schema()
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _complete(path: str, operation: dict[str, Any]) -> None:
    answers: dict[str, Any] = operation.setdefault("responses", {})
    wide: list[int] = []
    if path.startswith("/v1/"):
        wide += _API_WIDE
        operation["security"] = [{"bearer": []}]
    if "requestBody" in operation:
        wide += _WITH_BODY
    if operation.get("parameters"):
        wide.append(422)
    for status, entry in responses(*wide).items():
        answers.setdefault(str(status), entry)
    fastapi_422 = answers.get("422", {}).get("content", {}).get("application/json")
    if fastapi_422 is not None:
        answers["422"] = responses(422)[422]


def also_answers(app: FastAPI, status: int, applies: Callable[[str, str], bool]) -> None:
    """List `status` (a problem) in the OpenAPI document for each operation (path,
    method in upper case) `applies` says a middleware may answer with it."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()
        for path, item in schema.get("paths", {}).items():
            for method, operation in item.items():
                if applies(path, method.upper()):
                    operation.setdefault("responses", {}).setdefault(
                        str(status), responses(status)[status]
                    )
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
