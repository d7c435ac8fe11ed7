"""Item 8 of issue 23: limits on `serve` itself, against real `agents-runner serve` processes
on loopback: a deadline for a request's head (a slowloris client is cut off, others are
served meanwhile), a connection cap, event streams and claim long polls capped per token and
in total (429 with Retry-After), and /readyz's error texts only for a caller with a token."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.server.processes import Serve, start_serve, wait_for, write_json

TOKENS = {"a": "limits-a-secret", "b": "limits-b-secret", "c": "limits-c-secret"}


def tokens_file(directory: Path) -> Path:
    grants = [{"name": name, "role": "claimer", "tools": ["t"],
               "sha256": hashlib.sha256(token.encode()).hexdigest()}
              for name, token in TOKENS.items()]  # fmt: skip
    grants.append({"name": "ops", "role": "operator",
                   "sha256": hashlib.sha256(b"limits-ops-secret").hexdigest()})  # fmt: skip
    return write_json(directory / "tokens.json", grants)


def address(served: Serve) -> tuple[str, int]:
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def closed_by_server(sock: socket.socket, within_s: float, trickle: bytes = b"") -> float:
    """Seconds until the server closes `sock` (sending `trickle` a byte every 0.2 s
    meanwhile); fails after `within_s`."""
    start = time.monotonic()
    sock.settimeout(0.2)
    sent = 0
    while time.monotonic() - start < within_s:
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - start
        except TimeoutError:
            pass
        except ConnectionResetError:
            return time.monotonic() - start
        if sent < len(trickle):
            try:
                sock.sendall(trickle[sent : sent + 1])
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - start
            sent += 1
    raise AssertionError(f"the server kept the connection open for {within_s:g}s")


@pytest.fixture(scope="module")
def slow_heads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    directory = tmp_path_factory.mktemp("heads")
    served = start_serve(str(directory / "s.db"), directory, "--no-auth",
                         "--header-timeout", "1", "--body-timeout", "1")  # fmt: skip
    yield served
    assert served.stop() == 0, served.stderr()


def test_a_slowloris_head_is_cut_off_and_others_are_served(slow_heads: Serve) -> None:
    endless = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 200
    with ExitStack() as stack:
        silent = [stack.enter_context(socket.create_connection(address(slow_heads)))
                  for _ in range(5)]  # fmt: skip
        trickling = stack.enter_context(socket.create_connection(address(slow_heads)))
        assert httpx.get(f"{slow_heads.url}/healthz", timeout=10).status_code == 200
        # Bytes keep arriving, yet the head is not complete in time: closed.
        assert closed_by_server(trickling, 8, endless) < 6
        for sock in silent:  # nothing sent at all: closed too
            assert closed_by_server(sock, 8) < 8
        assert httpx.get(f"{slow_heads.url}/healthz", timeout=10).status_code == 200


def test_a_kept_alive_connections_next_head_has_its_own_deadline(slow_heads: Serve) -> None:
    with socket.create_connection(address(slow_heads)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sock.settimeout(10)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        # uvicorn's keep-alive timer stops at each byte: only the head deadline ends this.
        assert closed_by_server(sock, 8, b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 200) < 6


def test_a_head_sent_in_time_is_served(slow_heads: Serve) -> None:
    with socket.create_connection(address(slow_heads)) as sock:
        time.sleep(0.4)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        sock.settimeout(10)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")


def answer_of(sock: socket.socket, within_s: float) -> bytes:
    """What the server sends until it closes `sock`."""
    sock.settimeout(within_s)
    answer = b""
    while chunk := sock.recv(4096):
        answer += chunk
    return answer


BODY_HEAD = (b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n")  # fmt: skip


def test_a_trickled_body_gets_408_and_its_connection_closed(slow_heads: Serve) -> None:
    """The head came in time; the body a byte every 0.2 s would take 40 s: after
    --body-timeout (1 s here) the server answers 408 and closes, serving others meanwhile."""
    with socket.create_connection(address(slow_heads)) as sock:
        sock.sendall(BODY_HEAD + b'{"agent"')
        start = time.monotonic()
        sender = threading.Thread(target=trickle, args=(sock, b": " + b" " * 100), daemon=True)
        sender.start()
        assert httpx.get(f"{slow_heads.url}/healthz", timeout=10).status_code == 200
        answer = answer_of(sock, 10)
        assert time.monotonic() - start < 6
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"urn:agents-runner:problem:body_timeout" in answer
    assert b"did not arrive in full within 1 s" in answer
    assert b"connection: close" in answer.lower()


def trickle(sock: socket.socket, data: bytes) -> None:
    for byte in data:
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return  # the server closed it: what the test waits for
        time.sleep(0.2)


def test_a_body_that_arrives_in_time_is_read(slow_heads: Serve) -> None:
    with socket.create_connection(address(slow_heads)) as sock:
        body = b'{"agent": "no-such.json", "prompt": "hi"}'
        head = BODY_HEAD.replace(b"200", str(len(body)).encode()).replace(
            b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"
        )
        sock.sendall(head + body[:10])
        time.sleep(0.4)
        sock.sendall(body[10:])
        answer = answer_of(sock, 10)
    assert not answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert answer.startswith(b"HTTP/1.1 4"), answer[:200]  # the route's own answer


def test_beyond_the_connection_cap_requests_get_503(tmp_path: Path) -> None:
    served = start_serve(str(tmp_path / "s.db"), tmp_path, "--no-auth",
                         "--max-connections", "3", "--header-timeout", "2")  # fmt: skip
    try:
        with ExitStack() as stack:
            for _ in range(3):
                stack.enter_context(socket.create_connection(address(served)))
            time.sleep(0.2)  # accepted by the server's loop
            assert httpx.get(f"{served.url}/healthz", timeout=10).status_code == 503
            # The idle ones reach their head deadline, and their places are free again.
            wait_for(lambda: httpx.get(f"{served.url}/healthz", timeout=10).status_code == 200,
                     20, "a place under the connection cap")  # fmt: skip
    finally:
        assert served.stop() == 0, served.stderr()


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    directory = tmp_path_factory.mktemp("capped")
    served = start_serve(str(directory / "s.db"), directory, "--tokens",
                         str(tokens_file(directory)), "--max-event-streams", "3",
                         "--max-event-streams-per-token", "2", "--max-long-polls", "2",
                         "--max-long-polls-per-token", "1")  # fmt: skip
    yield served
    assert served.stop() == 0, served.stderr()


def too_many(answer: httpx.Response, option: str) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.headers["retry-after"] == "5"
    assert answer.headers["content-type"] == "application/problem+json"
    assert f"({option})" in answer.json()["detail"], answer.json()


def test_event_streams_are_capped_per_token_and_in_all(capped: Serve) -> None:
    clients = {name: capped.client(token) for name, token in TOKENS.items()}
    #: Each open stream's line iterator: dropping one would close its connection.
    following: list[Iterator[str]] = []
    with ExitStack() as stack:
        for client in clients.values():
            stack.enter_context(client)

        def open_stream(name: str) -> httpx.Response:
            answer = stack.enter_context(clients[name].stream("GET", "/v1/events"))
            if answer.status_code == 200:
                following.append(answer.iter_lines())
                assert next(following[-1]).startswith(": subscribed")
            else:
                answer.read()
            return answer

        first = clients["a"].stream("GET", "/v1/events")
        first_answer = first.__enter__()
        assert first_answer.status_code == 200
        first_lines = first_answer.iter_lines()
        assert next(first_lines).startswith(": subscribed")
        assert open_stream("a").status_code == 200
        too_many(open_stream("a"), "--max-event-streams-per-token")
        assert open_stream("b").status_code == 200
        too_many(open_stream("c"), "--max-event-streams")
        first.__exit__(None, None, None)  # a client goes: its place is free again

        def reopened() -> bool:
            return open_stream("c").status_code == 200

        wait_for(reopened, 20, "a freed event stream place")


def test_claim_long_polls_are_capped_per_token_and_in_all(capped: Serve) -> None:
    waiting: list[httpx.Response] = []

    def long_poll(name: str) -> None:
        with capped.client(TOKENS[name]) as http:
            while True:  # a probe below may hold the token's one place for a moment
                answer = http.post("/v1/claims", json={"tools": ["t"], "wait_seconds": 4})
                if answer.status_code != 429:
                    break
                time.sleep(0.01)
            waiting.append(answer)

    def quick(name: str) -> httpx.Response:
        with capped.client(TOKENS[name]) as http:
            return http.post("/v1/claims", json={"tools": ["t"]})

    poll_a = threading.Thread(target=long_poll, args=("a",))
    poll_a.start()
    wait_for(lambda: quick("a").status_code == 429, 10, "a's long poll holding its place")
    too_many(quick("a"), "--max-long-polls-per-token")
    assert quick("b").status_code == 200  # another token has its own place
    poll_b = threading.Thread(target=long_poll, args=("b",))
    poll_b.start()
    wait_for(lambda: quick("c").status_code == 429, 10, "two long polls holding the server's")
    too_many(quick("c"), "--max-long-polls")
    poll_a.join(30)
    poll_b.join(30)
    assert [w.status_code for w in waiting] == [200, 200], [w.text for w in waiting]
    assert quick("c").status_code == 200


def test_the_document_lists_the_429s(capped: Serve) -> None:
    paths = httpx.get(f"{capped.url}/openapi.json", timeout=10).json()["paths"]
    capped_ops = {(p, m) for p, item in paths.items() for m, op in item.items()
                  if "429" in op["responses"]}  # fmt: skip
    assert capped_ops == {("/v1/events", "get"), ("/v1/sessions/{session_id}/events", "get"),
                          ("/v1/claims", "post")}  # fmt: skip
    assert all("421" in op["responses"] for item in paths.values() for op in item.values())


def test_readyz_tells_why_only_to_a_caller_with_a_token(tmp_path: Path) -> None:
    """A Docker engine that is not there (a socket nobody listens on): the reason says
    what the host lacks, which is not for anonymous probes."""
    served = start_serve(str(tmp_path / "s.db"), tmp_path, "--tokens",
                         str(tokens_file(tmp_path)), "--pool-size", "1",
                         env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})  # fmt: skip
    try:
        anonymous = httpx.get(f"{served.url}/readyz", timeout=30)
        wrong = httpx.get(f"{served.url}/readyz", timeout=30,
                          headers={"Authorization": "Bearer nope"})  # fmt: skip
        with served.client("limits-ops-secret") as http:
            known = http.get("/readyz")
    finally:
        assert served.stop() == 0, served.stderr()
    assert anonymous.status_code == wrong.status_code == known.status_code == 503
    assert anonymous.json() == wrong.json() == {"status": "unavailable"}
    assert known.json()["store"] == "ok" and "No such file" in known.json()["docker"]


def test_by_default_a_silent_connection_is_closed_after_10_s(tmp_path: Path) -> None:
    served = start_serve(str(tmp_path / "s.db"), tmp_path, "--no-auth")
    try:
        with socket.create_connection(address(served)) as sock:
            assert 8 < closed_by_server(sock, 30) < 20
    finally:
        assert served.stop() == 0, served.stderr()
