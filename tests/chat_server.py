"""A small chat-completions server on 127.0.0.1 that the tests script reply by reply
(the `chat_server` fixture in tests/conftest.py starts one per test).

It speaks HTTP/1.1 with keep-alive, so a client that reuses its connection is seen doing
so: `connections` counts the TCP connections accepted."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ChatServer:
    def __init__(self) -> None:
        self.replies: list[tuple[int, dict, dict]] = []  # (status, headers, body)
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.connections = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                server.connections += 1

            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                server.requests.append(json.loads(self.rfile.read(length)))
                server.headers.append(dict(self.headers))
                status, headers, body = server.replies.pop(0)
                data = json.dumps(body).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def reply(self, message: dict, status: int = 200, headers: dict | None = None) -> None:
        body = {"choices": [{"index": 0, "message": message}]} if status == 200 else message
        self.replies.append((status, headers or {}, body))


@contextmanager
def serving() -> Iterator[ChatServer]:
    """A ChatServer answering on its own thread until the block ends."""
    server = ChatServer()
    thread = threading.Thread(target=server.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
