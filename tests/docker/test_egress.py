"""The egress battery: a sandbox with an allow-list reaches what it lists, and nothing else.

Every address here belongs to this machine or to a network this module creates: the
upstream servers `allowed.test` (with the alias `echo.allowed.test`) and `denied.test` are
containers on an *internal* network the module makes (so even they have no route off the
machine), and the host-side listeners are bound to that network's gateway address. Each
probe is a Python script run as a `bash` call in the bash-runner image through
DockerRunner, exactly as an agent's call runs; it prints one JSON document of what it saw.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest
from docker.types import LogConfig

from runner.isolation import CallOutcome, ContainerLimits, DockerRunner, PoolSettings, WarmPool
from runner.isolation.containers import (
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_OWNER_HOST,
    LABEL_ROLE,
    labels_for,
    my_owner_token,
)
from runner.isolation.egress import (
    EGRESS_NETWORK_ENV,
    EGRESS_PROXY_IMAGE,
    MAX_DENIED,
    NETWORK_PREFIX,
    EgressPolicy,
)
from tests.conftest import REPO, make_request
from tests.docker.conftest import BASH_IMAGE

pytestmark = pytest.mark.anyio

#: The upstream servers: HTTP on 80 (it answers with the path and Host it got, and logs
#: each request) and a TCP echo on 443 and 7000 (CONNECT targets: the proxy checks only
#: that a tunnel opens with a TLS ClientHello naming its host, so an echo of one serves
#: as a TLS server).
UPSTREAM_SERVER = r"""
import http.server, socketserver, sys, threading
NAME = sys.argv[1]

class Http(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print(f"GET {self.path} host={self.headers.get('Host')}", flush=True)
        body = f"hello from {NAME} path={self.path} host={self.headers.get('Host')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        print("ECHO connection", flush=True)
        while data := self.request.recv(4096):
            self.request.sendall(data)

class Server(socketserver.ThreadingTCPServer):
    daemon_threads = allow_reuse_address = True

for port in (443, 7000):
    threading.Thread(target=Server(("0.0.0.0", port), Echo).serve_forever, daemon=True).start()
server = http.server.ThreadingHTTPServer(("0.0.0.0", 80), Http)
print("listening", flush=True)
server.serve_forever()
"""

#: What every probe script starts with: small clients that report what happened.
PRELUDE = r'''
import errno, json, os, socket, struct, urllib.error, urllib.request
# The proxy's address is known only in here: HTTP_PROXY, as the runner set it.
_host, _, _port = os.environ.get("HTTP_PROXY", "http://0.0.0.0:0")[len("http://"):].partition(":")
PROXY = FACTS["proxy_host"], FACTS["proxy_port"] = _host, int(_port)

def why(exc):
    if isinstance(exc, TimeoutError):
        return "timeout"
    return "error " + errno.errorcode.get(exc.errno or 0, str(exc))

def proxied(raw):
    """Send raw bytes to the proxy, read to EOF: status, X-Egress-Denied, body."""
    try:
        s = socket.create_connection(PROXY, timeout=10)
        s.sendall(raw)
        s.shutdown(socket.SHUT_WR)  # no more requests: the proxy keeps a connection alive
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    except OSError as exc:
        return why(exc)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    denied = [l.split(":", 1)[1].strip() for l in lines[1:]
              if l.lower().startswith("x-egress-denied:")]
    return {"status": int(lines[0].split()[1]) if lines[0] else 0,
            "denied": denied[0] if denied else None, "body": body.decode(errors="replace"),
            "responses": data.count(b"HTTP/1.")}

def get(host, path="/", host_header=None):
    return proxied(f"GET http://{host}{path} HTTP/1.1\r\nHost: {host_header or host}\r\n\r\n"
                   .encode())

def client_hello(target):
    """A real TLS client's first flight (in memory), naming the tunnel's host as its
    server (SNI; none for an IP literal): what a tunnel must open with."""
    import ipaddress, ssl
    host = target.rsplit(":", 1)[0].strip("[]")
    try:
        ipaddress.ip_address(host)
        name = None
    except ValueError:
        name = host
    context = ssl.create_default_context()
    context.check_hostname = name is not None
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname=name)
    try:
        client.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()

def tunnel(target, payload=b"ping through the tunnel", hello=None):
    hello = client_hello(target) if hello is None else hello
    try:
        s = socket.create_connection(PROXY, timeout=10)
        s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head and (byte := s.recv(1)):
            head += byte
        status = int(head.split()[1]) if head else 0
        if status != 200:
            rest = head.decode("latin-1").split("\r\n")
            denied = [l.split(":", 1)[1].strip() for l in rest
                      if l.lower().startswith("x-egress-denied:")]
            return {"status": status, "denied": denied[0] if denied else None}
        s.sendall(hello + payload)
        echoed = b""
        while len(echoed) < len(hello + payload) and (chunk := s.recv(4096)):
            echoed += chunk
        return {"status": 200, "echo": echoed.removeprefix(hello).decode(errors="replace")}
    except OSError as exc:
        return why(exc)

def lookup(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET)})
    except socket.gaierror as exc:
        return f"gaierror {exc.errno}"

def dns_query(name, qtype=1):
    labels = b"".join(bytes([len(l)]) + l.encode() for l in name.split("."))
    return struct.pack("!6H", 7, 0x0100, 1, 0, 0, 0) + labels + b"\0" + struct.pack("!HH", qtype, 1)

def dns(server, name="", port=53, raw=None, tcp=False):
    query = raw if raw is not None else dns_query(name)
    try:
        if tcp:
            s = socket.create_connection((server, port), timeout=5)
            s.sendall(struct.pack("!H", len(query)) + query)
            answer = s.recv(2 + 512)[2:]
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(3)
            s.sendto(query, (server, port))
            answer = s.recv(512)
    except OSError as exc:
        return why(exc)
    return {"rcode": answer[3] & 15, "answers": struct.unpack("!H", answer[6:8])[0]}

def tcp(host, port, timeout=5):
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return "connected"
    except OSError as exc:
        return why(exc)

result = {}
'''


@dataclass
class Upstream:
    network: str
    gateway: str  # the host's own address on the test network
    ips: dict[str, str]
    containers: dict[str, str]

    def policy(self, *allow: str) -> EgressPolicy:
        listed = allow or ("allowed.test:80", "*.allowed.test:443", "localhost:80")
        return EgressPolicy(listed, upstream_network=self.network)

    def limits(self, *allow: str) -> ContainerLimits:
        return ContainerLimits(egress=self.policy(*allow))


@dataclass
class Listener:
    """A TCP server and a UDP socket on the host, bound to the test network's gateway."""

    address: str
    tcp_port: int = 0
    udp_port: int = 0
    seen: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def upstream(api: docker.APIClient) -> Iterator[Upstream]:
    try:
        api.inspect_image(EGRESS_PROXY_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {EGRESS_PROXY_IMAGE} is missing; run scripts/build-images")
    name = f"egress-test-{uuid.uuid4().hex[:8]}"
    # Internal: nothing on this network has a route off the machine, whatever happens.
    api.create_network(name, driver="bridge", internal=True,
                       labels=labels_for("egress-test", role="test-network"))  # fmt: skip
    containers: dict[str, str] = {}
    try:
        for host, aliases in (("allowed.test", ["allowed.test", "echo.allowed.test"]),
                              ("denied.test", ["denied.test"])):  # fmt: skip
            created = api.create_container(
                EGRESS_PROXY_IMAGE,
                entrypoint=["python3", "-u", "-c", UPSTREAM_SERVER, host],
                labels=labels_for("egress-test", role="test-upstream"),
                host_config=api.create_host_config(
                    network_mode=name,
                    read_only=True,
                    cap_drop=["ALL"],
                    sysctls={"net.ipv4.ip_unprivileged_port_start": "0"},
                    log_config=LogConfig(type="json-file"),
                ),
                networking_config=api.create_networking_config(
                    {name: api.create_endpoint_config(aliases=aliases)}
                ),
            )
            containers[host] = created["Id"]
            api.start(created["Id"])
        deadline = time.monotonic() + 30
        while not all(b"listening" in api.logs(c) for c in containers.values()):
            assert time.monotonic() < deadline, "the upstream servers did not start"
            time.sleep(0.1)
        ips = {host: api.inspect_container(c)["NetworkSettings"]["Networks"][name]["IPAddress"]
               for host, c in containers.items()}  # fmt: skip
        gateway = api.inspect_network(name)["IPAM"]["Config"][0]["Gateway"]
        yield Upstream(name, gateway, ips, containers)
    finally:
        for container in containers.values():
            api.remove_container(container, force=True)
        api.remove_network(name)


@pytest.fixture
def listener(upstream: Upstream) -> Iterator[Listener]:
    """What reaches the host through the test network: nothing, the tests show."""
    found = Listener(upstream.gateway)
    server = socket.create_server((upstream.gateway, 0))
    server.settimeout(0.2)
    datagrams = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    datagrams.bind((upstream.gateway, 0))
    datagrams.settimeout(0.2)
    found.tcp_port, found.udp_port = server.getsockname()[1], datagrams.getsockname()[1]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for sock in (server, datagrams):
                try:
                    if sock is server:
                        conn, peer = server.accept()
                        conn.close()
                        found.seen.append(f"tcp from {peer}")
                    else:
                        _, peer = datagrams.recvfrom(2048)
                        found.seen.append(f"udp from {peer}")
                except TimeoutError:
                    continue

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    yield found
    stop.set()
    thread.join()
    server.close()
    datagrams.close()


@pytest.fixture(autouse=True)
def no_gateway_left(api: docker.APIClient) -> Iterator[None]:
    """After every test: not one egress network or proxy of this process remains."""
    yield
    mine = [f"{LABEL_MANAGED}=1", f"{LABEL_OWNER}={my_owner_token()}"]
    networks = [n["Name"] for n in api.networks(filters={"label": mine})
                if n["Name"].startswith(NETWORK_PREFIX)]  # fmt: skip
    proxies = api.containers(all=True, filters={"label": [*mine, f"{LABEL_ROLE}=egress-proxy"]})
    assert networks == [] and proxies == [], f"left behind: {networks} {proxies}"


async def run_call(script: str, limits: ContainerLimits, seconds: float = 90) -> CallOutcome:
    async with DockerRunner(BASH_IMAGE, limits) as runner:
        return await runner.call(make_request("bash", {"script": script}, seconds=seconds))


def script_for(body: str, facts: dict[str, Any]) -> str:
    source = f"FACTS = {facts!r}\n" + PRELUDE + textwrap.dedent(body)
    return f"python3 - <<'PY'\n{source}\nprint(json.dumps(result))\nPY\n"


async def probe(
    upstream: Upstream, body: str, limits: ContainerLimits | None = None, **facts: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run a probe script in a sandbox with the module's policy: (what it printed,
    the call's runner_info)."""
    facts = {"allowed_ip": upstream.ips["allowed.test"], "denied_ip": upstream.ips["denied.test"],
             "gateway": upstream.gateway, **facts}  # fmt: skip
    outcome = await run_call(script_for(body, facts), limits or upstream.limits())
    assert outcome.ok, outcome.to_dict()
    content = outcome.result.output.content
    assert content["exit_code"] == 0, content["stderr"]
    return json.loads(content["stdout"].splitlines()[-1]), outcome.runner_info


def denied(info: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(r["kind"], r["host"], r["port"]) for r in info["egress_denied"]]


def reach_from_upstream(api: docker.APIClient, upstream: Upstream, listener: Listener) -> None:
    """The control: from a container on the test network the listener is reachable, so
    its silence during a sandbox's probe means the sandbox could not reach it."""
    tcp_to, udp_to = (listener.address, listener.tcp_port), (listener.address, listener.udp_port)
    code = (f"import socket as s; s.create_connection({tcp_to!r}, 5).close();"
            f" s.socket(s.AF_INET, s.SOCK_DGRAM).sendto(b'x', {udp_to!r})")  # fmt: skip
    run = api.exec_create(upstream.containers["denied.test"], ["python3", "-c", code])
    api.exec_start(run["Id"])
    deadline = time.monotonic() + 10
    while len(listener.seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [entry.split()[0] for entry in sorted(listener.seen)] == ["tcp", "udp"]


def upstream_log(api: docker.APIClient, upstream: Upstream, host: str) -> list[str]:
    lines = api.logs(upstream.containers[host]).decode().splitlines()
    return [line for line in lines if line != "listening"]


# --- what is allowed works -------------------------------------------------------------------


async def test_the_allowed_host_answers_over_plain_http(api, upstream):
    seen, info = await probe(upstream, """
        answer = urllib.request.urlopen("http://allowed.test/env", timeout=10)
        result["env_client"] = answer.read().decode()
        result["raw"] = get("allowed.test", "/raw")
    """)  # fmt: skip
    assert seen["env_client"] == "hello from allowed.test path=/env host=allowed.test"
    assert seen["raw"]["status"] == 200
    assert seen["raw"]["body"] == "hello from allowed.test path=/raw host=allowed.test"
    assert info["network"] == {"mode": "egress", "upstream": upstream.network,
                               "allow": ["allowed.test:80", "*.allowed.test:443",
                                         "localhost:80"]}  # fmt: skip
    assert info["egress_denied"] == [] and info["egress_denied_count"] == 0
    assert "GET /env host=allowed.test" in upstream_log(api, upstream, "allowed.test")


async def test_the_allowed_host_answers_through_connect(upstream):
    seen, info = await probe(upstream, """
        result["wildcard"] = tunnel("echo.allowed.test:443")
        result["apex"] = tunnel("allowed.test:443")
    """)  # fmt: skip
    assert seen["wildcard"] == {"status": 200, "echo": "ping through the tunnel"}
    # `*.allowed.test` names the names under allowed.test, not allowed.test itself.
    assert seen["apex"] == {"status": 403, "denied": "connect"}
    assert denied(info) == [("connect", "allowed.test", 443)]


async def test_a_tunnel_whose_hello_names_another_server_is_closed(upstream):
    """SNI is the CONNECT's host: a TLS front cannot route an allowed tunnel to a name the
    allow-list never listed. The 200 is sent; the refusal is the closed tunnel."""
    seen, info = await probe(upstream, """
        result["fronted"] = tunnel("echo.allowed.test:443", hello=client_hello("denied.test:443"))
    """)  # fmt: skip
    assert seen["fronted"] == {"status": 200, "echo": ""}
    assert denied(info) == [("tunnel", "echo.allowed.test", 443)]
    assert "names the server 'denied.test'" in info["egress_denied"][0]["detail"]


# --- what is not allowed is refused, and recorded ---------------------------------------------


async def test_the_denied_host_is_refused_by_name(api, upstream):
    seen, info = await probe(upstream, """
        result["http"] = get("denied.test")
        result["connect"] = tunnel("denied.test:80")
        result["other_port"] = get("allowed.test:8080")
        try:
            urllib.request.urlopen("http://denied.test/", timeout=10)
        except urllib.error.HTTPError as exc:
            result["env_client"] = [exc.code, exc.headers.get("X-Egress-Denied")]
    """)  # fmt: skip
    assert seen["http"]["status"] == 403 and seen["http"]["denied"] == "http"
    assert seen["connect"] == {"status": 403, "denied": "connect"}
    assert seen["other_port"]["status"] == 403
    assert seen["env_client"] == [403, "http"]
    assert denied(info) == [
        ("http", "denied.test", 80),
        ("connect", "denied.test", 80),
        ("http", "allowed.test", 8080),
        ("http", "denied.test", 80),
    ]
    assert all(r["detail"] == "not on the allow-list" for r in info["egress_denied"])
    assert upstream_log(api, upstream, "denied.test") == []


async def test_the_denied_host_is_refused_by_its_raw_ip(api, upstream):
    denied_ip, allowed_ip = upstream.ips["denied.test"], upstream.ips["allowed.test"]
    as_integer = int(ipaddress.ip_address(denied_ip))
    seen, info = await probe(upstream, """
        result["http"] = get(FACTS["denied_ip"])
        result["connect"] = tunnel(FACTS["denied_ip"] + ":80")
        result["allowed_by_ip"] = tunnel(FACTS["allowed_ip"] + ":80")
        result["mapped_v6"] = tunnel(f"[::ffff:{FACTS['denied_ip']}]:80")
        result["integer"] = get(str(FACTS["as_integer"]))
    """, as_integer=as_integer)  # fmt: skip
    assert seen["http"]["denied"] == "ip" and seen["connect"]["denied"] == "ip"
    # An allowed host's address is not its name: IP literals pass only when listed.
    assert seen["allowed_by_ip"] == {"status": 403, "denied": "ip"}
    assert seen["mapped_v6"] == {"status": 403, "denied": "ip"}
    assert seen["integer"]["status"] == 403  # never resolved as an address: not a listed name
    assert denied(info) == [("ip", denied_ip, 80), ("ip", denied_ip, 80), ("ip", allowed_ip, 80),
                            ("ip", denied_ip, 80), ("http", str(as_integer), 80)]  # fmt: skip
    assert upstream_log(api, upstream, "denied.test") == []


async def test_a_lookup_of_an_unlisted_name_is_refused(upstream):
    seen, info = await probe(upstream, """
        result["allowed"] = lookup("allowed.test")
        result["denied"] = lookup("denied.test")
        result["exfiltration"] = lookup("c2VjcmV0.denied.test")
        result["tcp"] = dns(FACTS["proxy_host"], "denied.test", tcp=True)
        result["direct_allowed"] = dns(FACTS["proxy_host"], "allowed.test")
    """)  # fmt: skip
    assert seen["allowed"] == [upstream.ips["allowed.test"]]
    assert seen["denied"] == seen["exfiltration"] == f"gaierror {socket.EAI_NONAME}"
    assert seen["tcp"] == {"rcode": 3, "answers": 0}  # NXDOMAIN over TCP too
    assert seen["direct_allowed"] == {"rcode": 0, "answers": 1}
    kinds = set(denied(info))
    assert kinds == {("dns", "denied.test", 53), ("dns", "c2vjcmv0.denied.test", 53)}


async def test_udp_reaches_nothing_but_the_proxys_dns(api, upstream, listener):
    seen, info = await probe(upstream, """
        # The resolver Docker puts in every container on a network forwards to the proxy only.
        result["docker_resolver"] = dns("127.0.0.11", "denied.test")
        # The test network's resolver and hosts: no route to them.
        result["gateway_53"] = dns(FACTS["gateway"], "denied.test")
        result["gateway_listener"] = dns(FACTS["gateway"], "denied.test", port=FACTS["udp_port"])
        result["denied_host"] = dns(FACTS["denied_ip"], "denied.test")
        # To the proxy: a datagram that is no DNS query, and one to another port.
        result["garbage"] = dns(FACTS["proxy_host"], raw=b"not a dns query at all")
        result["other_port"] = dns(FACTS["proxy_host"], "allowed.test", port=5353)
        result["proxy"] = FACTS["proxy_host"]
    """, udp_port=listener.udp_port)  # fmt: skip
    assert seen["docker_resolver"] == {"rcode": 3, "answers": 0}
    assert seen["gateway_53"] == seen["gateway_listener"] == seen["denied_host"] == "timeout"
    assert seen["garbage"] == "timeout"  # recorded and dropped
    assert seen["other_port"] in ("timeout", "error ECONNREFUSED")
    assert listener.seen == []
    reach_from_upstream(api, upstream, listener)
    assert denied(info) == [("dns", "denied.test", 53), ("udp", seen["proxy"], 53)]


async def test_a_host_header_that_lies_is_refused(api, upstream):
    seen, info = await probe(upstream, """
        result["lying"] = get("allowed.test", "/lie", host_header="denied.test")
        result["other_port"] = get("allowed.test", "/lie", host_header="allowed.test:8080")
        result["origin_form"] = proxied(b"GET /origin HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n")
        result["two_hosts"] = proxied(b"GET http://allowed.test/two HTTP/1.1\\r\\n"
                                      b"Host: allowed.test\\r\\nHost: denied.test\\r\\n\\r\\n")
        # A second request riding on a checked one is checked on its own: refused here.
        result["pipelined"] = proxied(b"GET http://allowed.test/first HTTP/1.1\\r\\n"
                                      b"Host: allowed.test\\r\\n\\r\\n"
                                      b"GET /second HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n")
    """)  # fmt: skip
    assert seen["lying"]["denied"] == "host_mismatch"
    assert seen["other_port"]["denied"] == "host_mismatch"
    assert seen["origin_form"]["denied"] == "http"  # its Host is its only name: not listed
    assert seen["two_hosts"]["denied"] == "host_mismatch"
    assert seen["pipelined"]["status"] == 200 and seen["pipelined"]["responses"] == 2
    first, _, second = seen["pipelined"]["body"].partition("HTTP/1.1 403 Forbidden")
    assert first == "hello from allowed.test path=/first host=allowed.test"
    assert "X-Egress-Denied: http" in second
    assert denied(info) == [("host_mismatch", "allowed.test", 80),
                            ("host_mismatch", "allowed.test", 80), ("http", "denied.test", 80),
                            ("host_mismatch", "allowed.test", 0),
                            ("http", "denied.test", 80)]  # fmt: skip
    log = upstream_log(api, upstream, "allowed.test")
    assert "GET /first host=allowed.test" in log
    assert not any("/second" in line or "/lie" in line or "/two" in line for line in log)
    assert upstream_log(api, upstream, "denied.test") == []


async def test_routes_and_resolv_conf_cannot_be_changed(upstream):
    seen, info = await probe(upstream, """
        for path, text in (("/etc/resolv.conf", "nameserver " + FACTS["denied_ip"] + "\\n"),
                           ("/etc/hosts", FACTS["denied_ip"] + " allowed.test\\n")):
            try:
                with open(path, "a") as f:
                    f.write(text)
                result[path] = "written"
            except OSError as exc:
                result[path] = why(exc)
        # RTM_NEWROUTE over netlink: a default route through the denied host.
        try:
            nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
            gateway_attr = struct.pack("HH", 8, 5) + socket.inet_aton(FACTS["denied_ip"])
            body = struct.pack("BBBBBBBBI", socket.AF_INET, 0, 0, 0, 254, 3, 0, 1, 0)
            flags = 0x1 | 0x4 | 0x400 | 0x200  # REQUEST, ACK, CREATE, EXCL
            nl.sendall(struct.pack("IHHII", 16 + len(body) + 8, 24, flags, 1, 0)
                       + body + gateway_attr)
            result["route_add"] = -struct.unpack("i", nl.recv(4096)[16:20])[0]
        except OSError as exc:
            result["route_add"] = why(exc)
        try:
            socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
            result["raw_socket"] = "opened"
        except OSError as exc:
            result["raw_socket"] = why(exc)
        result["caps"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")]
        result["after"] = {"lookup": lookup("allowed.test"), "denied": get("denied.test"),
                           "direct": tcp(FACTS["denied_ip"], 80, timeout=4)}
    """)  # fmt: skip
    assert seen["/etc/resolv.conf"] in ("error EACCES", "error EROFS")
    assert seen["/etc/hosts"] in ("error EACCES", "error EROFS")
    assert seen["route_add"] == 1  # EPERM: no CAP_NET_ADMIN
    assert seen["raw_socket"] == "error EPERM"
    assert seen["caps"] == ["0000000000000000"]
    assert seen["after"]["lookup"] == [upstream.ips["allowed.test"]]
    assert seen["after"]["denied"]["denied"] == "http"
    assert seen["after"]["direct"] != "connected"
    assert ("http", "denied.test", 80) in denied(info)


async def test_a_direct_connection_without_the_proxy_has_no_route(api, upstream, listener):
    seen, _ = await probe(upstream, """
        result["interfaces"] = sorted(os.listdir("/sys/class/net"))
        result["allowed_direct"] = tcp(FACTS["allowed_ip"], 80, timeout=4)
        result["host_direct"] = tcp(FACTS["gateway"], FACTS["tcp_port"], timeout=4)
        result["proxy_other_port"] = tcp(FACTS["proxy_host"], 22)
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            no_proxy.open("http://allowed.test/direct", timeout=4)
            result["without_proxy"] = "answered"
        except urllib.error.URLError as exc:
            reason = exc.reason
            result["without_proxy"] = why(reason) if isinstance(reason, OSError) else str(exc)
    """, tcp_port=listener.tcp_port)  # fmt: skip
    assert seen["interfaces"] == ["eth0", "lo"]
    unreachable = ("timeout", "error EHOSTUNREACH", "error ENETUNREACH")
    assert seen["allowed_direct"] in unreachable
    assert seen["host_direct"] in unreachable
    assert seen["without_proxy"] in unreachable
    assert seen["proxy_other_port"] == "error ECONNREFUSED"  # the proxy serves 3128 and 53 only
    assert listener.seen == []
    reach_from_upstream(api, upstream, listener)


async def test_an_allowed_name_must_resolve_to_an_allowed_address(upstream):
    seen, info = await probe(upstream, """
        result["http"] = get("localhost")
        result["dns"] = dns(FACTS["proxy_host"], "localhost")
    """)  # fmt: skip
    # localhost is on the list, but it resolves to loopback, which is never dialled.
    assert seen["http"]["denied"] == "ip"
    assert seen["dns"] == {"rcode": 0, "answers": 0}
    assert denied(info) == [("ip", "localhost", 80), ("ip", "localhost", 53)]
    assert "loopback" in info["egress_denied"][0]["detail"]


async def test_refusals_are_capped_and_all_counted(upstream):
    seen, info = await probe(upstream, """
        result["answers"] = [dns(FACTS["proxy_host"], f"n{i}.denied.test")["rcode"]
                             for i in range(150)]
    """)  # fmt: skip
    assert seen["answers"] == [3] * 150
    assert len(info["egress_denied"]) == MAX_DENIED
    assert info["egress_denied_count"] == 150
    assert info["egress_denied"][0]["host"] == "n0.denied.test"
    assert all(set(r) == {"at_ms", "kind", "host", "port", "detail"} for r in info["egress_denied"])


# --- without a policy, and the lifecycle ------------------------------------------------------


async def test_without_a_policy_the_sandbox_has_only_loopback():
    outcome = await run_call("ls /sys/class/net; grep -c nameserver /etc/resolv.conf",
                             ContainerLimits())  # fmt: skip
    assert outcome.result.output.content["stdout"].split() == ["lo", "0"]
    assert outcome.runner_info["network"] == {"mode": "none"}
    assert "egress_denied" not in outcome.runner_info


async def test_a_warm_pool_serves_egress_calls(upstream):
    request = "python3 -c 'import socket; socket.getaddrinfo(\"{name}\", 80)' 2>/dev/null; true"
    async with WarmPool(PoolSettings(size=1)) as pool:
        runner = pool.pooled(DockerRunner(BASH_IMAGE, upstream.limits()))
        assert await pool.filled(timeout_s=60)
        outcomes = []
        for name in ("first.denied.test", "second.denied.test"):
            script = request.format(name=name)
            outcomes.append(await runner.call(make_request("bash", {"script": script})))
    assert outcomes[0].runner_info["pooled"] is True
    # Each call has its own gateway: it sees only its own refusals.
    assert {r["host"] for r in outcomes[0].runner_info["egress_denied"]} == {"first.denied.test"}
    assert {r["host"] for r in outcomes[1].runner_info["egress_denied"]} == {"second.denied.test"}


async def test_egress_under_runsc_is_refused(upstream):
    limits = ContainerLimits(runtime="runsc", egress=upstream.policy())
    outcome = await run_call("echo never", limits)
    assert outcome.error_code == "WORKER_START_FAILED"
    assert "runsc" in outcome.result.error.message and "egress" in outcome.result.error.message


async def test_an_egress_policy_needs_an_upstream_network(monkeypatch):
    monkeypatch.delenv(EGRESS_NETWORK_ENV, raising=False)
    outcome = await run_call("echo never", ContainerLimits(egress=EgressPolicy(("a.test:80",))))
    assert outcome.error_code == "WORKER_START_FAILED"
    assert EGRESS_NETWORK_ENV in outcome.result.error.message
    missing = EgressPolicy(("a.test:80",), upstream_network=f"no-such-{uuid.uuid4().hex[:8]}")
    outcome = await run_call("echo never", ContainerLimits(egress=missing))
    assert outcome.error_code == "WORKER_START_FAILED"
    assert "does not exist" in outcome.result.error.message


async def test_a_missing_proxy_image_fails_the_start(upstream):
    policy = EgressPolicy(("allowed.test:80",), upstream_network=upstream.network,
                          proxy_image="agents-runner-test/no-such-proxy:latest")  # fmt: skip
    outcome = await run_call("echo never", ContainerLimits(egress=policy))
    assert outcome.error_code == "WORKER_START_FAILED"
    assert "scripts/build-images" in outcome.result.error.message


def test_sweep_removes_the_network_of_a_dead_owner(api):
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    names = {owner: f"{NETWORK_PREFIX}{uuid.uuid4().hex[:12]}"
             for owner in (f"{boot}/999999999/1", my_owner_token())}  # fmt: skip
    for owner, name in names.items():
        labels = {LABEL_MANAGED: "1", LABEL_OWNER: owner, LABEL_OWNER_HOST: socket.gethostname(),
                  LABEL_ROLE: "egress-network"}  # fmt: skip
        api.create_network(name, driver="bridge", internal=True, labels=labels)
    dead, alive = names.values()
    try:
        swept = subprocess.run([sys.executable, "-m", "runner.cli", "sweep"], cwd=REPO,
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        assert swept.returncode == 0, swept.stderr
        # Any process's sweep removes it (each runner sweeps at its first call), so
        # another may have come first: what counts is that only the dead owner's is gone.
        assert api.networks(names=[dead]) == [], swept.stdout
        assert len(api.networks(names=[alive])) == 1, swept.stdout
    finally:
        for name in names.values():
            if api.networks(names=[name]):
                api.remove_network(name)


def test_isolate_turns_egress_on_from_the_command_line(upstream, tmp_path):
    script = ("python3 -c 'import urllib.request; print(urllib.request.urlopen("
              "\"http://allowed.test/cli\", timeout=10).read().decode())'")  # fmt: skip
    request = make_request("bash", {"script": script}, seconds=90)
    env = {**os.environ, EGRESS_NETWORK_ENV: upstream.network}
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", "isolate", "--runner", "docker", "--image",
         BASH_IMAGE, "--egress-allow", "allowed.test:80", "--json"],
        input=request.model_dump_json(), capture_output=True, text=True, timeout=120,
        cwd=REPO, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["result"]["output"]["content"]["stdout"].strip() == (
        "hello from allowed.test path=/cli host=allowed.test"
    )
    assert outcome["runner"]["network"] == {"mode": "egress", "allow": ["allowed.test:80"],
                                            "upstream": upstream.network}  # fmt: skip


async def test_concurrent_calls_get_gateways_of_their_own(api, upstream):
    """Two calls at once: two internal networks, each holding one sandbox and its proxy."""
    mine = [f"{LABEL_MANAGED}=1", f"{LABEL_OWNER}={my_owner_token()}"]
    members: list[list[str]] = []

    def gateways() -> list[list[str]]:
        """The roles of the containers on each of our egress networks holding two. The
        engine lists an endpoint being made or removed as `ep-<id>`, with no container
        behind it yet: such a network is not counted until its members are real."""
        found = []
        for summary in api.networks(filters={"label": mine}):
            if not summary["Name"].startswith(NETWORK_PREFIX):
                continue
            try:
                ids = list(api.inspect_network(summary["Id"]).get("Containers") or {})
                if len(ids) != 2 or any(i.startswith("ep-") for i in ids):
                    continue
                found.append(sorted(api.inspect_container(i)["Config"]["Labels"][LABEL_ROLE]
                                    for i in ids))  # fmt: skip
            except docker.errors.NotFound:
                continue  # a member came or went while we looked: look again
        return found

    async def watch() -> None:
        with anyio.fail_after(60):
            while len(found := await anyio.to_thread.run_sync(gateways)) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.1)  # the engine's state: nothing to wait on but polling
        members.extend(found)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watch)
        for _ in range(2):
            tasks.start_soon(run_call, "sleep 4", upstream.limits())
    assert members == [["call", "egress-proxy"], ["call", "egress-proxy"]]
