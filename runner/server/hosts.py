"""Who may talk to the server at all, decided from the request's head before anything
else runs: the Host it was sent to, and (without access control) whether a browser
sent it.

- `HostCheck`: the Host header must name this server: a loopback name by default
  (`localhost`, `127.0.0.1`, `[::1]`, any port), or one `serve --allowed-host NAME`
  adds (`*.example.com` matches names under it). A page whose name was rebound to
  127.0.0.1 (DNS rebinding) sends its own name as Host, and is answered 421. The
  matching is Starlette's TrustedHostMiddleware; only its refusal is ours, as a problem.
- `BrowserCheck` (installed with `serve --no-auth`, where no token stands between a web
  page and the API): a request carrying `Origin`, or `Sec-Fetch-Site` other than `none`
  (what a browser sends for a request a page made), is answered 403.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runner.server.problems import problem_response

log = logging.getLogger(__name__)

#: The names a server answers to without `--allowed-host` (ports are not compared).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def check_host_pattern(pattern: str) -> str:
    """`pattern` as TrustedHostMiddleware takes it (lower case); ValueError saying why not."""
    name = pattern.strip().lower()
    if not name:
        raise ValueError("an empty host name")
    if "*" in name[1:] or (name.startswith("*") and name != "*" and not name.startswith("*.")):
        raise ValueError(f"{pattern!r}: a wildcard is only `*` or `*.domain`")
    if ":" in name and not (name.startswith("[") and name.endswith("]")):
        raise ValueError(f"{pattern!r}: give the name without a port (any port matches;"
                         " an IPv6 address in brackets: [2001:db8::1])")  # fmt: skip
    if "/" in name or " " in name:
        raise ValueError(f"{pattern!r} is not a host name")
    return name


class HostCheck:
    """ASGI middleware: a request whose Host is not one of `allowed` gets 421 (400
    without a Host at all), before any other middleware or route sees it."""

    def __init__(self, app: ASGIApp, allowed: Sequence[str] = LOOPBACK_HOSTS) -> None:
        self.app = app
        self.allowed = tuple(dict.fromkeys(check_host_pattern(name) for name in allowed))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        accepted = False

        async def through(scope: Scope, receive: Receive, _: Send) -> None:
            nonlocal accepted
            accepted = True
            await self.app(scope, receive, send)

        async def swallow(_: Message) -> None:
            """TrustedHostMiddleware's own refusal (plain text): ours replaces it."""

        matcher = TrustedHostMiddleware(through, list(self.allowed), www_redirect=False)
        await matcher(scope, receive, swallow)
        if accepted:
            return
        host = Headers(scope=scope).get("host")
        if host is None:
            await problem_response(400, "missing_host", "the request has no Host header")(
                scope, receive, send
            )
            return
        log.info("refused a request for host %r", host[:200])
        detail = (f"this server does not serve the host {host[:200]!r}; it answers to"
                  f" {', '.join(self.allowed)} (serve --allowed-host NAME adds one)")  # fmt: skip
        await problem_response(421, "misdirected_request", detail)(scope, receive, send)


class BrowserCheck:
    """ASGI middleware for a server without access control: requests a web page made
    (they carry `Origin`, or `Sec-Fetch-Site` other than `none`) are answered 403."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin, site = headers.get("origin"), headers.get("sec-fetch-site")
        if origin is None and site in (None, "none"):
            await self.app(scope, receive, send)
            return
        said = f"Origin {origin[:120]!r}" if origin is not None else f"Sec-Fetch-Site {site!r}"
        detail = (f"this server runs without access control (--no-auth) and answers no"
                  f" request a web page makes (this one carries {said}); serve with"
                  " --tokens FILE for browser clients")  # fmt: skip
        await problem_response(403, "browser_refused", detail)(scope, receive, send)
