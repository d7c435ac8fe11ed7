"""Request smuggling through the egress proxy (issue 23, finding 5).

On c574872 a `CONNECT allowed.test:8000` (a plain-HTTP port) opened a raw tunnel in which
pipelined requests reached the upstream with any Host (`denied.test`, `metadata.internal`),
and a bare LF inside a header value was forwarded as is, smuggling a second Host. Each
test here sends raw bytes from a sandbox (a `bash` call through DockerRunner with an
egress policy, as an agent's call runs) to the real proxy container, and reads back what
the upstream servers received.

Every address belongs to a network this module creates: `allowed.test` and `denied.test`
are containers on an *internal* network made here (no route off the machine). Each runs
Python's http.server (HTTP/1.1, keep-alive: a lenient parser that honours pipelining and
takes a bare LF as a line end, as many upstreams do) on ports 80, 8000 and 443 (plain
HTTP on 443 too: a tunnel that does not carry TLS must not reach it), and logs every
request it parses as a JSON line.

AGENTS_RUNNER_TEST_PROXY_IMAGE runs the battery against another proxy image (the one
built from c574872 fails the tests of the finding).
"""

from __future__ import annotations

import json
import os
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import docker
import pytest
from docker.types import LogConfig

from runner.isolation import ContainerLimits, DockerRunner, EgressPolicy
from runner.isolation.egress import EGRESS_PROXY_IMAGE
from tests.conftest import make_request
from tests.docker.conftest import BASH_IMAGE, engine_with

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

PROXY_IMAGE = os.environ.get("AGENTS_RUNNER_TEST_PROXY_IMAGE", EGRESS_PROXY_IMAGE)
ALLOW = ("allowed.test:80", "allowed.test:8000", "allowed.test:443")

#: The upstream: logs each request it parses (Host headers, framing, body) on stdout.
UPSTREAM_SERVER = r"""
import http.server, json, sys, threading
NAME = sys.argv[1]

class Http(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: pipelined requests are served in turn

    def do_request(self):
        cl, te = self.headers.get_all("Content-Length") or [], self.headers.get("Transfer-Encoding")
        body = b""
        if te and "chunked" in te.lower():
            while (size := int(self.rfile.readline().split(b";")[0] or b"0", 16)):
                body += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
        elif cl:
            body = self.rfile.read(int(cl[0]))
        print(json.dumps({"port": self.server.server_address[1], "method": self.command,
                          "path": self.path, "hosts": self.headers.get_all("Host") or [],
                          "content_length": cl, "transfer_encoding": te,
                          "body": body.decode("latin-1")}), flush=True)
        answer = f"{NAME} {self.command} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_POST = do_request

    def log_message(self, *args):
        pass

for port in (8000, 443):
    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Http)
    threading.Thread(target=server.serve_forever, daemon=True).start()
server = http.server.ThreadingHTTPServer(("0.0.0.0", 80), Http)
print("listening", flush=True)
server.serve_forever()
"""

#: What every probe starts with: raw exchanges with the proxy, each reported.
PRELUDE = r'''
import json, os, re, socket
_host, _, _port = os.environ["HTTP_PROXY"][len("http://"):].partition(":")
PROXY = (_host, int(_port))

def exchange(raw, then=b"", close=True):
    """Send `raw` to the proxy (and `then` after a 200 to a CONNECT), read to EOF."""
    s = socket.create_connection(PROXY, timeout=10)
    try:
        s.sendall(raw)
        data = b""
        if then:
            while b"\r\n\r\n" not in data and (byte := s.recv(1)):
                data += byte
            if b" 200 " in data.split(b"\r\n")[0]:
                s.sendall(then)
        if close:
            s.shutdown(socket.SHUT_WR)
        while chunk := s.recv(65536):
            data += chunk
    except OSError as exc:
        return {"error": str(exc)}
    finally:
        s.close()
    text = data.decode("latin-1")
    # The upstream's bodies end without a line break: a next status line follows them.
    statuses = [int(code) for code in re.findall(r"HTTP/1\.[01] (\d{3})", text)]
    denied = re.findall(r"(?im)^x-egress-denied: *(\S+)", text)
    return {"statuses": statuses, "denied": denied, "text": text}

result = {}
'''


@dataclass
class Upstream:
    network: str
    containers: dict[str, str]

    def limits(self) -> ContainerLimits:
        policy = EgressPolicy(ALLOW, upstream_network=self.network, proxy_image=PROXY_IMAGE)
        return ContainerLimits(egress=policy)


@pytest.fixture(scope="module")
def api() -> docker.APIClient:
    return engine_with(BASH_IMAGE, PROXY_IMAGE)


@pytest.fixture(scope="module")
def upstream(api: docker.APIClient) -> Iterator[Upstream]:
    name = f"smuggling-test-{uuid.uuid4().hex[:8]}"
    api.create_network(name, driver="bridge", internal=True,
                       labels={"io.agents-runner.test": "smuggling"})  # fmt: skip
    containers: dict[str, str] = {}
    try:
        for host in ("allowed.test", "denied.test"):
            created = api.create_container(
                PROXY_IMAGE,
                entrypoint=["python3", "-u", "-c", UPSTREAM_SERVER, host],
                labels={"io.agents-runner.test": "smuggling"},
                host_config=api.create_host_config(
                    network_mode=name,
                    read_only=True,
                    cap_drop=["ALL"],
                    sysctls={"net.ipv4.ip_unprivileged_port_start": "0"},
                    log_config=LogConfig(type="json-file"),
                ),
                networking_config=api.create_networking_config(
                    {name: api.create_endpoint_config(aliases=[host])}
                ),
            )
            containers[host] = created["Id"]
            api.start(created["Id"])
        deadline = time.monotonic() + 30
        while not all(b"listening" in api.logs(c) for c in containers.values()):
            assert time.monotonic() < deadline, "the upstream servers did not start"
            time.sleep(0.1)
        yield Upstream(name, containers)
    finally:
        for container in containers.values():
            api.remove_container(container, force=True)
        api.remove_network(name)


def received(api: docker.APIClient, upstream: Upstream, host: str) -> list[dict[str, Any]]:
    """Every request the upstream `host` parsed so far."""
    lines = api.logs(upstream.containers[host], stderr=False).decode().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


async def probe(upstream: Upstream, body: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run a probe in a sandbox behind the proxy: (what it printed, its runner_info)."""
    source = PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(result))\n"
    script = f"python3 - <<'PY'\n{source}\nPY\n"
    async with DockerRunner(BASH_IMAGE, upstream.limits()) as runner:
        outcome = await runner.call(make_request("bash", {"script": script}, seconds=90))
    assert outcome.ok, outcome.to_dict()
    content = outcome.result.output.content
    assert content["exit_code"] == 0, content["stderr"]
    return json.loads(content["stdout"].splitlines()[-1]), outcome.runner_info


def kinds(info: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(r["kind"], r["host"], r["port"]) for r in info["egress_denied"]]


def marked(api: docker.APIClient, upstream: Upstream, marker: str) -> list[dict[str, Any]]:
    """The requests of either upstream whose path or body carries `marker`."""
    return [r for host in upstream.containers for r in received(api, upstream, host)
            if marker in r["path"] or marker in r["body"]]  # fmt: skip


# --- tunnels -----------------------------------------------------------------------------


async def test_connect_to_a_plain_http_port_is_refused(api, upstream):
    """The finding: a tunnel to :8000, then requests for any Host inside it."""
    seen, info = await probe(upstream, """
        inside = (b"GET /tunnel-a HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n"
                  b"GET /tunnel-b HTTP/1.1\\r\\nHost: metadata.internal\\r\\n\\r\\n")
        result["connect"] = exchange(b"CONNECT allowed.test:8000 HTTP/1.1\\r\\n"
                                     b"Host: allowed.test:8000\\r\\n\\r\\n", then=inside)
        result["connect_80"] = exchange(b"CONNECT allowed.test:80 HTTP/1.1\\r\\n"
                                        b"Host: allowed.test:80\\r\\n\\r\\n", then=inside)
    """)  # fmt: skip
    assert marked(api, upstream, "/tunnel-") == []
    assert seen["connect"]["statuses"] == [403] and seen["connect"]["denied"] == ["connect"]
    assert seen["connect_80"]["statuses"] == [403]
    assert kinds(info) == [("connect", "allowed.test", 8000), ("connect", "allowed.test", 80)]
    assert "TLS ports only (443)" in info["egress_denied"][0]["detail"]


async def test_a_tunnel_to_a_tls_port_carries_only_tls(api, upstream):
    """:443 is a TLS port, but what the upstream runs there is not the proxy's to trust:
    a tunnel whose first bytes are no ClientHello is closed before it reaches it."""
    seen, info = await probe(upstream, """
        inside = b"GET /tunnel-plain HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n"
        result["plain"] = exchange(b"CONNECT allowed.test:443 HTTP/1.1\\r\\n"
                                   b"Host: allowed.test:443\\r\\n\\r\\n", then=inside)
    """)  # fmt: skip
    assert marked(api, upstream, "/tunnel-plain") == []
    assert seen["plain"]["statuses"] == [200]  # the tunnel opened, then closed unused
    assert kinds(info) == [("tunnel", "allowed.test", 443)]
    assert "TLS record" in info["egress_denied"][0]["detail"]


# --- one request, one parse ---------------------------------------------------------------


async def test_a_bare_lf_cannot_smuggle_a_header(api, upstream):
    seen, info = await probe(upstream, """
        result["lf_in_value"] = exchange(b"GET http://allowed.test/lf-value HTTP/1.1\\r\\n"
                                         b"Host: allowed.test\\r\\nX-A: b\\nHost: denied.test"
                                         b"\\r\\n\\r\\n")
        result["cr_in_value"] = exchange(b"GET http://allowed.test/cr-value HTTP/1.1\\r\\n"
                                         b"Host: allowed.test\\r\\nX-A: b\\rHost: denied.test"
                                         b"\\r\\n\\r\\n")
        result["lf_lines"] = exchange(b"GET http://allowed.test/lf-lines HTTP/1.1\\n"
                                      b"Host: allowed.test\\n\\n")
    """)  # fmt: skip
    for name in ("lf_in_value", "cr_in_value", "lf_lines"):
        assert seen[name]["statuses"] == [400], (name, seen[name])
        assert seen[name]["denied"] == ["malformed"]
    assert marked(api, upstream, "-value") == marked(api, upstream, "/lf-lines") == []
    assert [k for k, _, _ in kinds(info)] == ["malformed"] * 3
    assert all("bare CR or LF" in r["detail"] for r in info["egress_denied"])


async def test_obs_fold_is_refused(api, upstream):
    seen, info = await probe(upstream, """
        result["fold"] = exchange(b"GET http://allowed.test/fold HTTP/1.1\\r\\n"
                                  b"Host: allowed.test\\r\\nX-A: b\\r\\n Host: denied.test"
                                  b"\\r\\n\\r\\n")
        result["tab"] = exchange(b"GET http://allowed.test/fold-tab HTTP/1.1\\r\\n"
                                 b"Host: allowed.test\\r\\nX-A: b\\r\\n\\tc\\r\\n\\r\\n")
    """)  # fmt: skip
    assert seen["fold"]["statuses"] == seen["tab"]["statuses"] == [400]
    assert marked(api, upstream, "/fold") == []
    assert [(k, r["detail"]) for (k, _, _), r in zip(kinds(info), info["egress_denied"],
                                                       strict=True)] == [
        ("malformed", "a folded header line (obs-fold)")] * 2  # fmt: skip


async def test_cl_te_and_te_cl_are_refused(api, upstream):
    """Both framings on one request: whichever one each side honoured, the bytes after
    the shorter body would be the upstream's next request."""
    seen, info = await probe(upstream, """
        smuggled = b"GET /smuggled-clte HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n"
        result["cl_te"] = exchange(b"POST http://allowed.test/clte HTTP/1.1\\r\\n"
                                   b"Host: allowed.test\\r\\nContent-Length: %d\\r\\n"
                                   b"Transfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\n%s"
                                   % (5 + len(smuggled), smuggled))
        chunk = b"GET /smuggled-tecl HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n"
        result["te_cl"] = exchange(b"POST http://allowed.test/tecl HTTP/1.1\\r\\n"
                                   b"Host: allowed.test\\r\\nTransfer-Encoding: chunked\\r\\n"
                                   b"Content-Length: 4\\r\\n\\r\\n%x\\r\\n%s\\r\\n0\\r\\n\\r\\n"
                                   % (len(chunk), chunk))
        result["te_twice"] = exchange(b"POST http://allowed.test/te-twice HTTP/1.1\\r\\n"
                                      b"Host: allowed.test\\r\\nTransfer-Encoding: chunked\\r\\n"
                                      b"Transfer-Encoding: identity\\r\\n\\r\\n0\\r\\n\\r\\n")
        result["te_odd"] = exchange(b"POST http://allowed.test/te-odd HTTP/1.1\\r\\n"
                                    b"Host: allowed.test\\r\\nTransfer-Encoding: xchunked\\r\\n"
                                    b"\\r\\n0\\r\\n\\r\\n")
    """)  # fmt: skip
    for name in ("cl_te", "te_cl", "te_twice", "te_odd"):
        assert seen[name]["statuses"] in ([400], [501]), (name, seen[name])
        assert seen[name]["denied"] == ["malformed"]
    assert marked(api, upstream, "smuggled-") == []
    for path in ("/clte", "/tecl", "/te-twice", "/te-odd"):
        assert marked(api, upstream, path) == []
    assert [k for k, _, _ in kinds(info)] == ["malformed"] * 4


async def test_a_chunked_body_reaches_the_upstream_as_one_request(api, upstream):
    """What is allowed still works, framed once: a chunked body is re-chunked, and a
    request inside it stays body."""
    seen, info = await probe(upstream, """
        inner = b"GET /inner-chunk HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n"
        result["chunked"] = exchange(b"POST http://allowed.test/chunked HTTP/1.1\\r\\n"
                                     b"Host: allowed.test\\r\\nTransfer-Encoding: chunked\\r\\n"
                                     b"Connection: close\\r\\n\\r\\n%x\\r\\n%s\\r\\n0\\r\\n\\r\\n"
                                     % (len(inner), inner))
    """)  # fmt: skip
    assert seen["chunked"]["statuses"] == [200]
    got = [r for r in received(api, upstream, "allowed.test") if r["path"] == "/chunked"]
    assert [(r["hosts"], r["transfer_encoding"], r["content_length"]) for r in got] == [
        (["allowed.test"], "chunked", [])]  # fmt: skip
    assert got[0]["body"].startswith("GET /inner-chunk")
    assert [r for r in marked(api, upstream, "/inner-chunk") if r["path"] != "/chunked"] == []
    assert info["egress_denied"] == []


async def test_a_repeated_content_length_is_refused(api, upstream):
    seen, info = await probe(upstream, """
        result["same"] = exchange(b"POST http://allowed.test/cl-same HTTP/1.1\\r\\n"
                                  b"Host: allowed.test\\r\\nContent-Length: 4\\r\\n"
                                  b"Content-Length: 4\\r\\n\\r\\nabcd")
        result["differing"] = exchange(b"POST http://allowed.test/cl-differ HTTP/1.1\\r\\n"
                                       b"Host: allowed.test\\r\\nContent-Length: 4\\r\\n"
                                       b"Content-Length: 40\\r\\n\\r\\nabcd")
        result["listed"] = exchange(b"POST http://allowed.test/cl-list HTTP/1.1\\r\\n"
                                    b"Host: allowed.test\\r\\nContent-Length: 4, 4\\r\\n\\r\\nabcd")
    """)  # fmt: skip
    for name in ("same", "differing", "listed"):
        assert seen[name]["statuses"] == [400], (name, seen[name])
    assert marked(api, upstream, "/cl-") == []
    assert [(k, r["detail"]) for (k, _, _), r in zip(kinds(info), info["egress_denied"],
                                                       strict=True)] == [
        ("malformed", "more than one Content-Length")] * 3  # fmt: skip


# --- every request checked ----------------------------------------------------------------


async def test_the_host_must_match_the_absolute_form_target(api, upstream):
    seen, info = await probe(upstream, """
        result["other_host"] = exchange(b"GET http://allowed.test/abs-a HTTP/1.1\\r\\n"
                                        b"Host: denied.test\\r\\n\\r\\n")
        result["metadata"] = exchange(b"GET http://allowed.test/abs-b HTTP/1.1\\r\\n"
                                      b"Host: metadata.internal\\r\\n\\r\\n")
        result["other_port"] = exchange(b"GET http://allowed.test/abs-c HTTP/1.1\\r\\n"
                                        b"Host: allowed.test:8000\\r\\n\\r\\n")
        result["denied_target"] = exchange(b"GET http://denied.test/abs-d HTTP/1.1\\r\\n"
                                           b"Host: allowed.test\\r\\n\\r\\n")
        result["same"] = exchange(b"GET http://allowed.test:8000/abs-ok HTTP/1.1\\r\\n"
                                  b"Host: ALLOWED.test.:8000\\r\\n\\r\\n")
    """)  # fmt: skip
    for name in ("other_host", "metadata", "other_port", "denied_target"):
        assert seen[name]["statuses"] == [403], (name, seen[name])
    assert seen["same"]["statuses"] == [200]
    assert marked(api, upstream, "/abs-") == [
        {"port": 8000, "method": "GET", "path": "/abs-ok", "hosts": ["allowed.test:8000"],
         "content_length": [], "transfer_encoding": None, "body": ""}]  # fmt: skip
    assert kinds(info) == [("host_mismatch", "allowed.test", 80)] * 3 + [
        ("host_mismatch", "denied.test", 80)]  # fmt: skip


async def test_pipelined_requests_are_each_checked(api, upstream):
    """Keep-alive: each request of a connection is checked on its own; the first refused
    one is answered 403 and ends the connection, so nothing after it is read."""
    seen, info = await probe(upstream, """
        first = b"GET http://allowed.test/pipe-1 HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"
        result["allowed_twice"] = exchange(
            first + b"GET http://allowed.test:8000/pipe-2 HTTP/1.1\\r\\n"
                    b"Host: allowed.test:8000\\r\\n\\r\\n")
        result["then_denied"] = exchange(
            first + b"GET http://denied.test/pipe-3 HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n"
            + b"GET /pipe-4 HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n")
        result["origin_form"] = exchange(
            first + b"GET /pipe-5 HTTP/1.1\\r\\nHost: metadata.internal\\r\\n\\r\\n")
        result["lf_second"] = exchange(
            first + b"GET http://allowed.test/pipe-6 HTTP/1.1\\r\\nHost: allowed.test\\r\\n"
                    b"X-A: b\\nHost: denied.test\\r\\n\\r\\n")
    """)  # fmt: skip
    assert seen["allowed_twice"]["statuses"] == [200, 200]
    assert seen["then_denied"]["statuses"] == [200, 403]
    assert seen["origin_form"]["statuses"] == [200, 403]
    assert seen["lf_second"]["statuses"] == [200, 400]
    paths = sorted(r["path"] for r in marked(api, upstream, "/pipe-"))
    assert paths == ["/pipe-1", "/pipe-1", "/pipe-1", "/pipe-1", "/pipe-2"]
    assert all(r["hosts"] in (["allowed.test"], ["allowed.test:8000"])
               for r in marked(api, upstream, "/pipe-"))  # fmt: skip
    assert received(api, upstream, "denied.test") == []
    assert [k for k, _, _ in kinds(info)] == ["http", "http", "malformed"]
    assert kinds(info)[:2] == [("http", "denied.test", 80), ("http", "metadata.internal", 80)]
