"""Finding 3 of issue 23, the network half: `serve` answered any Host header, so a web page
whose name was rebound to 127.0.0.1 (DNS rebinding) could drive a `--no-auth` server. Against
real `agents-runner serve` processes on loopback: a Host the server does not serve gets 421
before any route runs; loopback names (any port) and `--allowed-host` names are served; and
without access control, a request a browser makes (Origin, Sec-Fetch-Site) is refused."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.processes import Serve, start_serve, write_json
from tests.server.test_serve_cli import serve

TOKEN = "host-operator-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def tokens_file(directory: Path) -> Path:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    return write_json(directory / "tokens.json",
                      [{"name": "ops", "role": "operator", "sha256": digest}])  # fmt: skip


@pytest.fixture(scope="module")
def no_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    directory = tmp_path_factory.mktemp("no-auth")
    served = start_serve(str(directory / "s.db"), directory, "--no-auth")
    yield served
    assert served.stop() == 0, served.stderr()


@pytest.fixture(scope="module")
def with_tokens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    directory = tmp_path_factory.mktemp("tokens")
    served = start_serve(str(directory / "s.db"), directory, "--tokens",
                         str(tokens_file(directory)), "--allowed-host", "runner.example.test",
                         "--allowed-host", "*.corp.test")  # fmt: skip
    yield served
    assert served.stop() == 0, served.stderr()


def refused(answer: httpx.Response, status: int, kind: str) -> str:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json()
    assert body["type"] == f"urn:agents-runner:problem:{kind}", body
    detail: str = body["detail"]
    return detail


def test_a_rebound_name_cannot_create_a_session_on_a_no_auth_server(no_auth: Serve) -> None:
    """What the page's script sends once its name resolves to 127.0.0.1: its own Host."""
    rebound = {"Host": "rebound.attacker.test:" + no_auth.url.rsplit(":", 1)[1]}
    agent = {"slug": "x", "provider": {"tag": "scripted", "responses": [{"text": "hi"}]}}
    with no_auth.client() as http:
        answer = http.post("/v1/sessions", headers=rebound, json={"agent": agent,
                                                                   "prompt": "go"})  # fmt: skip
        detail = refused(answer, 421, "misdirected_request")
        assert "'rebound.attacker.test:" in detail and "--allowed-host" in detail
        assert refused(http.get("/v1/sessions", headers=rebound), 421, "misdirected_request")
        assert http.get("/v1/sessions").json()["sessions"] == []


@pytest.mark.parametrize("host", ["evil.example", "localhost.evil.example", "127.0.0.1.nip.io",
                                  "runner.example.test.evil", "corp.test"])  # fmt: skip
def test_foreign_hosts_get_421_even_with_a_token(with_tokens: Serve, host: str) -> None:
    with with_tokens.client(TOKEN) as http:
        for path in ("/healthz", "/readyz", "/v1/sessions", "/openapi.json"):
            refused(http.get(path, headers={"Host": host}), 421, "misdirected_request")


SERVED = ["localhost", "localhost:1", "127.0.0.1", "127.0.0.1:65535", "[::1]", "[::1]:8080",
          "LOCALHOST", "runner.example.test", "runner.example.test:443", "a.corp.test",
          "b.a.corp.test:1"]  # fmt: skip


@pytest.mark.parametrize("host", SERVED)
def test_loopback_and_allowed_names_are_served(with_tokens: Serve, host: str) -> None:
    with with_tokens.client(TOKEN) as http:
        answer = http.get("/v1/sessions", headers={"Host": host})
    assert answer.status_code == 200, answer.text


def raw(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_request_without_a_host_is_400(with_tokens: Serve) -> None:
    answer = raw(with_tokens.url, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b"no Host header" in answer


@pytest.mark.parametrize(
    "headers",
    [{"Origin": "http://evil.example"}, {"Origin": "null"},
     {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
     {"Sec-Fetch-Site": "same-origin"}],
)  # fmt: skip
def test_without_access_control_browser_requests_are_refused(
    no_auth: Serve, headers: dict[str, str]
) -> None:
    with no_auth.client() as http:
        body = {"agent": "x", "prompt": "go"}
        for answer in (http.get("/v1/sessions", headers=headers),
                       http.post("/v1/sessions", headers=headers, json=body)):  # fmt: skip
            assert "--no-auth" in refused(answer, 403, "browser_refused")


def test_a_typed_url_and_plain_clients_still_reach_a_no_auth_server(no_auth: Serve) -> None:
    with no_auth.client() as http:
        assert http.get("/v1/sessions", headers={"Sec-Fetch-Site": "none"}).status_code == 200
        assert http.get("/v1/sessions").status_code == 200


def test_with_tokens_a_browser_client_is_not_refused(with_tokens: Serve) -> None:
    """A browser holds no bearer token by itself: with tokens, Origin changes nothing."""
    with with_tokens.client(TOKEN) as http:
        answer = http.get("/v1/sessions", headers={"Origin": "https://app.example.test"})
    assert answer.status_code == 200, answer.text


def test_the_bound_address_is_a_name_the_server_serves(tmp_path: Path) -> None:
    served = start_serve(str(tmp_path / "s.db"), tmp_path, "--no-auth", host="127.0.0.2")
    try:
        port = served.url.rsplit(":", 1)[1]
        with served.client() as http:
            assert http.get("/healthz").status_code == 200
            refused(http.get("/healthz", headers={"Host": f"127.0.0.3:{port}"}), 421,
                    "misdirected_request")  # fmt: skip
    finally:
        assert served.stop() == 0, served.stderr()


@pytest.mark.parametrize(
    ("args", "said"),
    [(["--no-auth", "--allowed-host", "*"], "--allowed-host '*' takes any Host"),
     (["--no-auth", "--allowed-host", "name:80"], "--allowed-host: 'name:80': give the name"),
     (["--no-auth", "--allowed-host", "a.*.test"], "--allowed-host: 'a.*.test': a wildcard")],
)  # fmt: skip
def test_bad_allowed_hosts_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], said: str
) -> None:
    done = serve("--store", str(tmp_path / "s.db"), *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"agents-runner: error: {said}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
