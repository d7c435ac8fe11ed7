"""EgressPolicy's checks and the proxy's rules, without an engine: the allow-list syntax
with its errors, the address rule, and the DNS wire format the proxy speaks."""

from __future__ import annotations

import importlib.util
import ipaddress
import ssl
import struct
import sys
from types import ModuleType

import pytest

from runner.cli.settings import EngineSettings
from runner.isolation import ContainerLimits, EgressPolicy
from runner.isolation.egress import EGRESS_NETWORK_ENV, network_info, parse_allow_entry
from runner.session.execute import container_limits
from runner.session.policy import DockerSpec, EgressSpec
from runner.session.settings import with_egress_network
from tests.conftest import REPO


def load_proxy() -> ModuleType:
    path = REPO / "images" / "egress-proxy" / "proxy.py"
    spec = importlib.util.spec_from_file_location("egress_proxy", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["egress_proxy"] = module
    spec.loader.exec_module(module)
    return module


proxy = load_proxy()


@pytest.mark.parametrize(
    ("entry", "parsed"),
    [
        ("allowed.test:80", ("allowed.test", 80)),
        ("Packages.Example.TEST.:443", ("packages.example.test", 443)),
        ("*.corp.example:443", ("*.corp.example", 443)),
        ("10.0.0.5:8080", ("10.0.0.5", 8080)),
        ("[2001:db8::1]:443", ("2001:db8::1", 443)),
    ],
)
def test_allow_entries_parse(entry, parsed):
    assert parse_allow_entry(entry) == parsed


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("allowed.test", "is not HOST:PORT"),
        ("allowed.test:0", "from 1 to 65535"),
        ("allowed.test:http", "from 1 to 65535"),
        ("*:443", "is not a host name"),
        ("a.*.example:443", "is not a host name"),
        ("under_score.test:80", "is not a host name"),
        ("127.0.0.1:80", "loopback"),
        ("169.254.169.254:80", "never dials"),
        ("[::1]:443", "never dials"),
        ("[not-v6]:443", "is not an IPv6 address"),
        ("2001:db8::1:443", "is not HOST:PORT"),
    ],
)
def test_bad_allow_entries_say_what_is_wrong(entry, says):
    with pytest.raises(ValueError, match=r"EgressPolicy\.allow\[0\]") as raised:
        EgressPolicy((entry,))
    assert says in str(raised.value)


def test_a_policy_is_normalised_and_checked_as_a_whole():
    policy = EgressPolicy(["B.test:80", "b.test:80", "[2001:DB8::1]:443"])  # a list is fine
    assert policy.allow == ("b.test:80", "[2001:db8::1]:443")
    with pytest.raises(ValueError, match="is empty"):
        EgressPolicy(())
    with pytest.raises(ValueError, match="a list of HOST:PORT"):
        EgressPolicy("allowed.test:80")
    with pytest.raises(ValueError, match=r"allow_addresses\[0\]"):
        EgressPolicy(("a.test:80",), allow_addresses=("not a range",))
    with pytest.raises(ValueError, match="never dials"):
        EgressPolicy(("a.test:80",), allow_addresses=("169.254.0.0/16",))
    for upstream in ("", "none", "host", "container:abc"):
        with pytest.raises(ValueError, match="upstream_network"):
            EgressPolicy(("a.test:80",), upstream_network=upstream)


def test_egress_and_a_named_network_exclude_each_other():
    with pytest.raises(ValueError, match="egress or network, not both"):
        ContainerLimits(network="bridge", egress=EgressPolicy(("a.test:80",)))


def test_the_upstream_comes_from_the_policy_or_the_environment(monkeypatch):
    """The policy's own network, else the one the commands read from the environment
    (runner/cli/settings.py) and give the agent, which fills the specs that name none:
    the library itself reads no variable."""
    monkeypatch.delenv(EGRESS_NETWORK_ENV, raising=False)
    assert EgressPolicy(("a.test:80",)).upstream() is None
    assert EngineSettings().agent_settings().egress_network is None
    monkeypatch.setenv(EGRESS_NETWORK_ENV, "corp-egress")
    assert EgressPolicy(("a.test:80",)).upstream() is None  # never read here
    network = EngineSettings().agent_settings().egress_network
    assert network == "corp-egress"
    spec = DockerSpec.model_validate({"image": "x", "egress": {"allow": ["a.test:80"]}})
    limits = container_limits(with_egress_network(spec, network))
    assert limits.egress is not None and limits.egress.upstream() == "corp-egress"
    mine = spec.model_copy(update={"egress": EgressSpec(allow=["a.test:80"], network="mine")})
    limits = container_limits(with_egress_network(mine, network))
    assert limits.egress is not None and limits.egress.upstream() == "mine"
    assert EgressPolicy(("a.test:80",), upstream_network="mine").upstream() == "mine"


def test_network_info_says_what_a_call_got(monkeypatch):
    monkeypatch.delenv(EGRESS_NETWORK_ENV, raising=False)
    assert network_info("none", None) == {"mode": "none"}
    assert network_info("host", None) == {"mode": "host"}
    assert network_info("lab", None) == {"mode": "network", "name": "lab"}
    policy = EgressPolicy(("a.test:80",), upstream_network="up")
    assert network_info("none", policy) == {"mode": "egress", "allow": ["a.test:80"],
                                            "upstream": "up"}  # fmt: skip


# --- the proxy's rules ------------------------------------------------------------------


def rules(**extra):
    config = {"allow": ["allowed.test:80", "*.corp.example:443", "10.9.8.7:8080"],
              "refuse": ["172.30.0.0/16", "172.31.0.1/32"],
              "private": ["172.31.0.0/16", "10.1.0.0/16"], **extra}  # fmt: skip
    return proxy.Rules(config)


def test_names_match_exactly_or_under_a_wildcard():
    r = rules()
    assert r.name_allowed("allowed.test", 80)
    assert not r.name_allowed("allowed.test", 443)
    assert not r.name_allowed("sub.allowed.test", 80)
    assert r.name_allowed("a.corp.example", 443) and r.name_allowed("a.b.corp.example", 443)
    assert not r.name_allowed("corp.example", 443)  # the wildcard is for names under it
    assert not r.name_allowed("evilcorp.example", 443)
    assert r.name_allowed("allowed.test")  # DNS: on the list with any port
    assert r.literal_allowed(ipaddress.ip_address("10.9.8.7"), 8080)
    assert not r.literal_allowed(ipaddress.ip_address("10.9.8.7"), 80)


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("172.31.0.5", None),  # on the upstream network
        ("10.1.2.3", None),  # a range the operator listed
        ("8.8.8.8", None),  # global: never dialled by a test, only judged
        ("172.31.0.1", "gateway"),  # the host's own address on the upstream
        ("172.30.0.9", "own network"),  # the sandbox's network
        ("127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("::1", "loopback"),
        ("224.0.0.1", "multicast"),
        ("192.168.1.1", "private address outside"),
    ],
)
def test_the_address_rule(address, refused):
    reason = rules().address_refusal(ipaddress.ip_address(address))
    assert (reason is None) if refused is None else (refused in reason)


def test_a_listed_literal_lifts_only_the_private_rule():
    r = rules()
    assert r.address_refusal(ipaddress.ip_address("10.9.8.7"), listed=True) is None
    assert "loopback" in r.address_refusal(ipaddress.ip_address("127.0.0.1"), listed=True)


def test_ipv4_mapped_literals_are_judged_as_ipv4():
    assert proxy.ip_literal("::ffff:127.0.0.1") == ipaddress.ip_address("127.0.0.1")
    assert proxy.ip_literal("allowed.test") is None


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("a.test:80", ("a.test", 80)), ("A.Test.", ("a.test", 80)), ("[::1]:8080", ("::1", 8080)),
     ("a.test:x", None), ("a:b:c", None), ("a.test:70000", None)],
)  # fmt: skip
def test_split_authority(text, parsed):
    assert proxy.split_authority(text, 80) == parsed


@pytest.mark.parametrize(
    ("head", "says"),
    [
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: b\nHost: c\r\n\r\n", "bare CR or LF"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: b\rHost: c\r\n\r\n", "bare CR or LF"),
        (b"GET / HTTP/1.1\nHost: a\n\n", "bare CR or LF"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n", "obs-fold"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\n",
         "more than one Content-Length"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\n",
         "more than one Content-Length"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked"
         b"\r\n\r\n", "both Content-Length and Transfer-Encoding"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n", "more than one Transfer-Encoding"),
    ],
)  # fmt: skip
def test_heads_h11_would_tolerate_are_refused_first(head, says):
    with pytest.raises(proxy.BadRequest, match=says):
        proxy.check_head(head + b"body that is not checked\n")


def test_heads_that_pass_and_heads_still_arriving():
    proxy.check_head(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\na\nb")
    proxy.check_head(b"GET / HTTP/1.1\r\nHost: a\r")  # a CR that may yet get its LF
    with pytest.raises(proxy.BadRequest, match="bare"):  # refused before the head ends
        proxy.check_head(b"GET / HTTP/1.1\r\nHost: a\nX")
    with pytest.raises(proxy.Refused, match="more than one Host"):
        proxy.check_head(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")


def client_hello(server_hostname: str | None = "allowed.test", **options: object) -> bytes:
    """The first flight of a real TLS client (Python's ssl, in memory: no network)."""
    context = ssl.create_default_context()
    if server_hostname is None:
        context.check_hostname = False
    for name, value in options.items():
        setattr(context, name, value)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


def test_a_tunnel_must_open_with_a_client_hello():
    assert proxy.tls_hello_refusal(b"\x16\x03\x01\x02\x00\x01rest") is None
    assert proxy.tls_hello_refusal(client_hello()) is None
    assert proxy.tls_hello_refusal(client_hello(maximum_version=ssl.TLSVersion.TLSv1_2)) is None
    assert "TLS record" in proxy.tls_hello_refusal(b"GET / HTTP/1.1\r\n")
    assert "not a ClientHello" in proxy.tls_hello_refusal(b"\x16\x03\x03\x00\x10\x02")
    assert "closed before" in proxy.tls_hello_refusal(b"\x16\x03")
    assert "TLS record" in proxy.tls_hello_refusal(b"\x16\x03\x01\xff\xff\x01")  # too long


def test_a_tunnel_s_hello_must_name_the_connect_host():
    """SNI is the CONNECT's host: a TLS front routing by SNI cannot take the tunnel to
    another name the allow-list never listed."""
    hello = client_hello()
    assert proxy.client_hello_server_name(hello) == "allowed.test"
    assert proxy.server_name_refusal(hello, "allowed.test") is None
    assert proxy.server_name_refusal(hello, "Allowed.Test.") is None  # normalised alike
    tls12 = client_hello(maximum_version=ssl.TLSVersion.TLSv1_2)
    assert proxy.server_name_refusal(tls12, "allowed.test") is None
    fronted = client_hello("denied.test")
    assert "names the server 'denied.test', not the tunnel's host 'allowed.test'" in (
        proxy.server_name_refusal(fronted, "allowed.test")
    )
    nameless = client_hello(None)
    assert proxy.client_hello_server_name(nameless) is None
    assert "names no server (SNI)" in proxy.server_name_refusal(nameless, "allowed.test")
    assert proxy.server_name_refusal(nameless, "192.0.2.7") is None  # an IP literal: no SNI
    assert "not the tunnel's host" in proxy.server_name_refusal(hello, "192.0.2.7")


def test_a_hello_the_proxy_cannot_read_whole_is_refused():
    hello = client_hello()
    assert proxy.record_size(hello) == len(hello)  # Python sends it in one record
    size = int.from_bytes(hello[6:9], "big")
    split = hello[:3] + (size).to_bytes(2, "big") + hello[5:5 + size]  # fmt: skip
    assert "does not fit" in proxy.server_name_refusal(split, "allowed.test")
    # a record and a message that agree, cut inside the session id: vectors overrun it
    truncated = (
        hello[:3] + (54).to_bytes(2, "big") + b"\x01" + (50).to_bytes(3, "big") + hello[9:59]
    )
    assert "truncated" in proxy.server_name_refusal(truncated, "allowed.test")
    assert "not a ClientHello" in proxy.server_name_refusal(b"\x16\x03\x01\x00\x04\x02\x00\x00\x00",
                                                            "allowed.test")  # fmt: skip


def test_a_malformed_or_doubled_server_name_is_refused():
    def hello_with(extensions: bytes) -> bytes:
        body = b"\x03\x03" + bytes(32) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
        body += len(extensions).to_bytes(2, "big") + extensions
        message = b"\x01" + len(body).to_bytes(3, "big") + body
        return b"\x16\x03\x01" + len(message).to_bytes(2, "big") + message

    def sni(*names: bytes) -> bytes:
        entries = b"".join(b"\x00" + len(n).to_bytes(2, "big") + n for n in names)
        data = len(entries).to_bytes(2, "big") + entries
        return b"\x00\x00" + len(data).to_bytes(2, "big") + data

    assert proxy.server_name_refusal(hello_with(sni(b"allowed.test")), "allowed.test") is None
    assert "twice" in proxy.server_name_refusal(
        hello_with(sni(b"allowed.test") + sni(b"denied.test")), "allowed.test"
    )
    assert "one host name" in proxy.server_name_refusal(
        hello_with(sni(b"allowed.test", b"denied.test")), "allowed.test"
    )
    assert "not ASCII" in proxy.server_name_refusal(hello_with(sni("é.test".encode())), "x.test")
    assert "malformed" in proxy.server_name_refusal(hello_with(b"\x00\x00\x00\x01\x00"), "a.test")
    assert "truncated" in proxy.server_name_refusal(hello_with(b"\x00\x00\x00\x09"), "a.test")
    no_extensions = hello_with(b"")[:-2]  # no extensions block at all
    fixed = no_extensions[:3] + (len(no_extensions) - 5).to_bytes(2, "big") + b"\x01" + (
        len(no_extensions) - 9).to_bytes(3, "big") + no_extensions[9:]  # fmt: skip
    assert "names no server" in proxy.server_name_refusal(fixed, "allowed.test")


def test_tls_ports_are_checked_and_normalised():
    assert EgressPolicy(("a.test:443",)).tls_ports == (443,)
    assert EgressPolicy(("a.test:8443",), tls_ports=[8443, 443, 443]).tls_ports == (443, 8443)
    assert EgressPolicy(("a.test:80",), tls_ports=()).tls_ports == ()  # no CONNECT at all
    for bad in ((0,), (70000,), ("443",), (True,)):
        with pytest.raises(ValueError, match=r"tls_ports\[0\]"):
            EgressPolicy(("a.test:443",), tls_ports=bad)
    with pytest.raises(ValueError, match="a list of port numbers"):
        EgressPolicy(("a.test:443",), tls_ports=443)


def query(name: str, qtype: int = 1, flags: int = 0x0100) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return struct.pack("!6H", 42, flags, 1, 0, 0, 0) + labels + b"\0" + struct.pack("!HH", qtype, 1)


def test_dns_queries_parse_and_answers_are_well_formed():
    parsed = proxy.Query(query("Allowed.TEST", qtype=28))
    assert (parsed.id, parsed.name, parsed.qtype, parsed.qclass) == (42, "allowed.test", 28, 1)
    answer = parsed.answer(0, [ipaddress.ip_address("2001:db8::1")])
    ident, flags, qd, an, ns, ar = struct.unpack("!6H", answer[:12])
    assert (ident, flags & 0x800F, qd, an, ns, ar) == (42, 0x8000, 1, 1, 0, 0)
    assert answer.endswith(ipaddress.ip_address("2001:db8::1").packed)
    nx = struct.unpack("!6H", proxy.Query(query("x.test")).answer(3)[:12])
    assert nx[1] & 0xF == 3 and nx[3] == 0
    for bad in (b"short", query("a.test", flags=0x8100), query("a.test")[:-3],
                struct.pack("!6H", 1, 0x0100, 2, 0, 0, 0)):  # fmt: skip
        with pytest.raises(ValueError):
            proxy.Query(bad)
