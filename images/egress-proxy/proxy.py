"""egress-proxy: the one exit of a sandbox whose call has an egress policy.

runner/isolation/egress.py starts one per call, in a hardened container attached to the
call's internal network (where the sandbox is, with no route out) and to the upstream
network the operator named. It listens on its internal address only:

- port 3128, an HTTP proxy: `CONNECT host:port` to a TLS port (443 unless the config
  lists others) whose tunnel must open with a TLS ClientHello whose server name (SNI)
  is the CONNECT's host (none only for an IP literal), and plain
  `GET http://host/...` by its Host. A target passes when its name (or IP literal)
  is on the allow-list with that port AND every address it is dialled at passes the
  address rule (`Rules.address_refusal`): never loopback, link-local (cloud metadata),
  multicast, reserved, the sandbox's own network or the host's gateways; a private
  address only inside the upstream network or a range the operator listed. Requests are
  parsed by h11, after `check_head` refused what h11 would tolerate (bare CR or LF,
  obs-fold, a repeated Content-Length, Content-Length with Transfer-Encoding); a plain
  request whose Host header differs from its absolute URI is refused; every request of
  a keep-alive connection is checked on its own, and reaches its upstream as h11 writes
  it again (origin form, the checked Host, one framing, `Connection: close`).
- port 53 (UDP and TCP), DNS: A and AAAA answers for allowed names only; every other
  name is NXDOMAIN and never forwarded anywhere (no exfiltration by lookup).

Every refusal is written to stdout as one JSON line `{"denied": {"at_ms", "kind", "host",
"port", "detail"}}` (the first MAX_RECORDS of them; all are counted) and logged through
the `egress-proxy` logger on stderr. Stdout's first line is `{"ready": ...}` once it
listens; on SIGTERM it writes `{"end": true, "denied_count": N}` and exits. The runner
reads these back into the call's runner_info["egress_denied"].

Configuration: the JSON document in $EGRESS_CONFIG (written by egress.py's
`open_gateway`: allow, listen, refuse, private, tls_ports).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import re
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterable
from typing import Any, cast
from urllib.parse import urlsplit

import h11

logger = logging.getLogger("egress-proxy")

HTTP_PORT = 3128
DNS_PORT = 53
#: Refusal records written to stdout; later ones are only counted.
MAX_RECORDS = 100
#: A request head larger than this is refused.
HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT_S = 30.0
#: How long a body or a response may pause between reads.
IDLE_TIMEOUT_S = 300.0
#: The ports CONNECT may reach when the config names none.
DEFAULT_TLS_PORTS = (443,)
CONNECT_TIMEOUT_S = 10.0
#: Connections served at once (the container's open-file limit is 1024).
MAX_CONNECTIONS = 256
DNS_TTL_S = 30
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
               "proxy-authenticate", "te", "trailer", "upgrade"}  # fmt: skip
#: Request headers the proxy writes itself or answers (Expect: 100-continue) itself.
_NOT_FORWARDED = _HOP_BY_HOP | {"host", "expect"}
_NOT_RETURNED = _HOP_BY_HOP

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


# --- the rules ---------------------------------------------------------------------------


def split_authority(text: str, default_port: int | None = None) -> tuple[str, int] | None:
    """'host:port', '[v6]:port' (or a bare host with a default port) -> (host, port)."""
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" not in text:
        host, port_text = text, ""
    else:
        return None
    if not port_text:
        if default_port is None:
            return None
        return normal_host(host), default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return normal_host(host), int(port_text)


def normal_host(host: str) -> str:
    return host.strip().lower().rstrip(".")


def ip_literal(host: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


class Rules:
    """The allow-list and the address rule of one call."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.names: set[tuple[str, int]] = set()
        self.suffixes: set[tuple[str, int]] = set()  # "*.corp.example:443" -> ".corp.example"
        self.literals: set[tuple[IPAddress, int]] = set()
        for entry in config["allow"]:
            parsed = split_authority(entry)
            if parsed is None:
                raise ValueError(f"allow-list entry {entry!r} is not HOST:PORT")
            host, port = parsed
            literal = ip_literal(host)
            if literal is not None:
                self.literals.add((literal, port))
            elif host.startswith("*."):
                self.suffixes.add((host[1:], port))
            else:
                self.names.add((host, port))
        #: Never dialled: the sandbox's own network, the hosts' gateways.
        self.refused: list[IPNetwork] = [ipaddress.ip_network(n) for n in config["refuse"]]
        #: Private addresses that may be dialled: the upstream network's, the operator's.
        self.private_ok: list[IPNetwork] = [ipaddress.ip_network(n) for n in config["private"]]

    def name_allowed(self, host: str, port: int | None = None) -> bool:
        """Whether `host` is on the list with `port` (None: with any port)."""
        for name, allowed_port in self.names:
            if name == host and port in (None, allowed_port):
                return True
        for suffix, allowed_port in self.suffixes:
            if host.endswith(suffix) and len(host) > len(suffix) and port in (None, allowed_port):
                return True
        return False

    def literal_allowed(self, address: IPAddress, port: int) -> bool:
        return (address, port) in self.literals

    def address_refusal(self, address: IPAddress, listed: bool = False) -> str | None:
        """Why `address` may not be dialled, or None. `listed`: the allow-list names it
        as a literal, which lifts the private-address rule and nothing else."""
        if any(address in network for network in self.refused):
            return "the sandbox's own network or a gateway of the host"
        if (address.is_loopback or address.is_link_local or address.is_multicast
                or address.is_unspecified or address.is_reserved):  # fmt: skip
            return "a loopback, link-local, multicast or reserved address"
        if listed or address.is_global:
            return None
        if any(address in network for network in self.private_ok):
            return None
        return "a private address outside the upstream network"


class Recorder:
    """Writes each refusal as a JSON line on stdout (the first MAX_RECORDS) and logs it."""

    def __init__(self) -> None:
        self.count = 0

    def deny(self, kind: str, host: str, port: int, detail: str) -> None:
        self.count += 1
        host = host[:253]
        if self.count == MAX_RECORDS + 1:  # stdout and stderr stay bounded, whatever comes
            logger.warning("more than %d refusals: the rest are only counted", MAX_RECORDS)
        if self.count <= MAX_RECORDS:
            logger.warning("denied %s %s:%d: %s", kind, host, port, detail)
            emit({"denied": {"at_ms": int(time.time() * 1000), "kind": kind, "host": host,
                             "port": port, "detail": detail}})  # fmt: skip


def emit(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")
    sys.stdout.flush()


async def resolve(host: str, family: int = socket.AF_UNSPEC) -> list[IPAddress]:
    """The addresses the proxy's own resolver gives for an allowed name (none: [])."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, None, family=family, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        logger.info("cannot resolve %s: %s", host, exc)
        return []
    found: list[IPAddress] = []
    for info in infos:
        address = ip_literal(str(info[4][0]).split("%")[0])
        if address is not None and address not in found:
            found.append(address)
    return found


# --- HTTP: CONNECT and plain requests ----------------------------------------------------
#
# h11 parses and frames every message in both directions; a request reaches an upstream
# only as h11 writes it again (origin form, the checked Host, one framing), so the
# upstream never parses bytes the proxy did not. h11 is lenient where RFC 9112 lets a
# recipient be (bare LF as a line end, obs-fold, a repeated equal Content-Length,
# Transfer-Encoding winning over Content-Length): `check_head` refuses those first.

_HEAD_END = re.compile(rb"\n\r?\n")  # where h11 ends a head (bare LF included)
_BARE = re.compile(rb"\r(?!\n)|(?<!\r)\n")


class Refused(Exception):
    """The rules said no: recorded, and answered 403."""

    def __init__(self, kind: str, host: str, port: int, detail: str) -> None:
        super().__init__(detail)
        self.kind, self.host, self.port, self.detail = kind, host, port, detail


class UpstreamFailed(ConnectionError):
    """Allowed, but the upstream cannot be resolved or reached: answered 502."""


class BadRequest(Exception):
    """Not a request the proxy parses one way only: recorded as `malformed`, answered 400."""

    def __init__(self, detail: str, status: int = 400) -> None:
        super().__init__(detail)
        self.status = status


def check_head(buffer: bytes) -> None:
    """Refuse the request head at the start of `buffer` (as much as has arrived) where
    h11 would be lenient: BadRequest, or Refused for a second Host header."""
    end = _HEAD_END.search(buffer)
    head = buffer if end is None else buffer[: end.end()]
    complete = head if end is not None or not head.endswith(b"\r") else head[:-1]
    if _BARE.search(complete):
        raise BadRequest("a bare CR or LF in the request head (lines end with CRLF only)")
    if end is None:
        return
    lines = head[:-4].split(b"\r\n")[1:]
    fields = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            raise BadRequest("a folded header line (obs-fold)")
        name, _, value = line.partition(b":")
        fields.append((name.strip().lower(), value.strip()))
    hosts = [value for name, value in fields if name == b"host"]
    if len(hosts) > 1:
        shown = hosts[0].decode("latin-1")[:253]
        raise Refused("host_mismatch", shown, 0, "more than one Host header")
    lengths = [value for name, value in fields if name == b"content-length"]
    if len(lengths) > 1 or any(b"," in value for value in lengths):
        raise BadRequest("more than one Content-Length")
    encodings = [value for name, value in fields if name == b"transfer-encoding"]
    if len(encodings) > 1:
        raise BadRequest("more than one Transfer-Encoding header")
    if encodings and lengths:
        raise BadRequest("both Content-Length and Transfer-Encoding (one framing only)")


def authority(host: str, port: int, default_port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port == default_port else f"{shown}:{port}"


def tls_hello_refusal(first: bytes) -> str | None:
    """Why the first bytes a client sends in a tunnel are not a TLS ClientHello, or None:
    a TLS record header (handshake, version 3.x, a record length TLS allows) and the
    handshake type ClientHello."""
    if len(first) < 6:
        return "the tunnel closed before a TLS ClientHello"
    content_type, major, minor, length, handshake = struct.unpack("!BBBHB", first[:6])
    if content_type != 22 or major != 3 or minor > 4 or not 0 < length <= 2**14 + 2048:
        return f"the tunnel does not start with a TLS record ({first[:16]!r})"
    if handshake != 1:
        return "the tunnel's first TLS record is not a ClientHello"
    return None


def record_size(first: bytes) -> int:
    """The bytes of the first TLS record (header included), once tls_hello_refusal passed."""
    return 5 + int.from_bytes(first[3:5], "big")


def client_hello_server_name(record: bytes) -> str | None:
    """The host name a ClientHello's server_name extension (RFC 6066) asks for, normalised;
    None when it sends none. ValueError saying what is wrong when the record is not one
    whole, well-formed ClientHello (a hello split across records counts: clients send it
    in one, and the name must be read before a byte reaches the upstream)."""
    body = memoryview(record)[5:]
    if len(body) < 4 or body[0] != 1:
        raise ValueError("the first TLS record is not a ClientHello")
    size = int.from_bytes(body[1:4], "big")
    if size > len(body) - 4:
        raise ValueError("the ClientHello does not fit in the tunnel's first TLS record")
    hello, at = body[4 : 4 + size], 34  # client_version (2) and random (32)

    def take(width: int) -> memoryview:
        nonlocal at
        if at + width > len(hello):
            raise ValueError("the ClientHello is truncated")
        piece, at = hello[at : at + width], at + width
        return piece

    def vector(length_bytes: int) -> memoryview:
        return take(int.from_bytes(take(length_bytes), "big"))

    vector(1), vector(2), vector(1)  # session id, cipher suites, compression methods
    if at == len(hello):
        return None  # no extensions at all
    extensions, names = vector(2), []
    while extensions:
        if len(extensions) < 4:
            raise ValueError("the ClientHello's extensions are truncated")
        kind, length = int.from_bytes(extensions[:2], "big"), int.from_bytes(extensions[2:4], "big")
        if 4 + length > len(extensions):
            raise ValueError("the ClientHello's extensions are truncated")
        if kind == 0:
            names.append(bytes(extensions[4 : 4 + length]))
        extensions = extensions[4 + length :]
    if not names:
        return None
    if len(names) > 1:
        raise ValueError("the ClientHello sends server_name twice")
    return _host_name_of(names[0])


def _host_name_of(extension: bytes) -> str:
    """The one host_name entry of a server_name extension's list."""
    if len(extension) < 2 or int.from_bytes(extension[:2], "big") != len(extension) - 2:
        raise ValueError("the ClientHello's server_name is malformed")
    entries, found = extension[2:], []
    while entries:
        if len(entries) < 3:
            raise ValueError("the ClientHello's server_name is malformed")
        kind, length = entries[0], int.from_bytes(entries[1:3], "big")
        if 3 + length > len(entries):
            raise ValueError("the ClientHello's server_name is malformed")
        if kind == 0:
            found.append(entries[3 : 3 + length])
        entries = entries[3 + length :]
    if len(found) != 1:
        raise ValueError("the ClientHello's server_name must hold one host name")
    try:
        name = found[0].decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("the ClientHello's server name is not ASCII") from None
    return normal_host(name)


def server_name_refusal(record: bytes, host: str) -> str | None:
    """Why a tunnel to `host` must not carry this ClientHello, or None: its server name
    (SNI) must be the CONNECT's host, so a TLS front (a CDN that routes by SNI) cannot
    take the tunnel elsewhere. A hello to a name must send one; to an IP literal it may
    send none (clients send no SNI for an address)."""
    try:
        name = client_hello_server_name(record)
    except ValueError as exc:
        return str(exc)
    if name is None:
        if ip_literal(host) is not None:
            return None
        return f"the ClientHello names no server (SNI); a tunnel to {host} must name it"
    if name != normal_host(host):
        return f"the ClientHello names the server {name!r}, not the tunnel's host {host!r}"
    return None


class HttpProxy:
    def __init__(self, rules: Rules, recorder: Recorder, tls_ports: Iterable[int]) -> None:
        self.rules = rules
        self.recorder = recorder
        self.tls_ports = frozenset(tls_ports)
        self.slots = asyncio.Semaphore(MAX_CONNECTIONS)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self.slots:
            try:
                await self._serve(reader, writer)
            except Refused as refused:
                self.recorder.deny(refused.kind, refused.host, refused.port, refused.detail)
                await respond(writer, 403, f"egress denied ({refused.kind}):"
                              f" {refused.host}:{refused.port}: {refused.detail}",
                              denied=refused.kind)  # fmt: skip
            except BadRequest as exc:
                self.recorder.deny("malformed", "", 0, str(exc))
                await respond(writer, exc.status, str(exc), denied="malformed")
            except UpstreamFailed as exc:  # allowed, but the upstream did not answer
                logger.info("%s", exc)
                await respond(writer, 502, str(exc))
            except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
                pass  # the client went away or never finished its head: nothing to answer
            finally:
                writer.close()
                with contextlib.suppress(ConnectionError, OSError):
                    await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Every request of the connection in turn, each checked on its own; the first
        refusal ends the connection."""
        client = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_LIMIT)
        while True:
            async with asyncio.timeout(HEAD_TIMEOUT_S):  # the whole head, not each read
                event = await next_event(client, reader, HEAD_TIMEOUT_S)
            if isinstance(event, h11.ConnectionClosed):
                return
            if not isinstance(event, h11.Request):
                raise BadRequest(f"expected a request, got {type(event).__name__}")
            method = event.method.decode("ascii")
            target = event.target.decode("ascii")
            headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in event.headers]
            if method == "CONNECT":
                await self._connect(client, reader, writer, target)
                return
            host, port, path = self._plain_target(target, headers)
            if not await self._forward(client, reader, writer, event, host, port, path):
                return
            if client.our_state is not h11.DONE or client.their_state is not h11.DONE:
                return
            client.start_next_cycle()

    async def _connect(
        self,
        client: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        target: str,
    ) -> None:
        """A tunnel to an allowed host's TLS port that carries TLS from its first byte."""
        parsed = split_authority(target)
        if parsed is None:
            raise BadRequest(f"CONNECT needs host:port, got {target[:100]!r}")
        host, port = parsed
        up_reader, up_writer = await self._dial("connect", host, port)
        try:
            writer.write(client.send(h11.Response(status_code=200, headers=[],
                                                  reason=b"Connection established")))  # fmt: skip
            await writer.drain()
            first = client.trailing_data[0]
            async with asyncio.timeout(HEAD_TIMEOUT_S):  # the whole first record
                first = await read_at_least(reader, first, 6)
                refusal = tls_hello_refusal(first)
                if refusal is None:
                    first = await read_at_least(reader, first, record_size(first))
                    refusal = server_name_refusal(first[: record_size(first)], host)
            if refusal is not None:  # the 200 is sent: the refusal is the closed tunnel
                self.recorder.deny("tunnel", host, port, refusal)
                return
            up_writer.write(first)
            await up_writer.drain()
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            up_writer.close()

    def _plain_target(self, target: str, headers: list[tuple[str, str]]) -> tuple[str, int, str]:
        hosts = [value for name, value in headers if name == "host"]
        host_header = split_authority(hosts[0], 80) if hosts else None
        if hosts and host_header is None:
            raise BadRequest(f"a bad Host header {hosts[0][:100]!r}")
        if target.startswith("/"):  # origin form: the Host header is the only name
            if host_header is None:
                raise BadRequest("a request in origin form needs a Host header")
            return host_header[0], host_header[1], target
        url = urlsplit(target)
        if url.scheme.lower() != "http" or not url.hostname:
            raise Refused("http", url.hostname or target[:100], 0,
                          "only http:// is proxied as is; use CONNECT for the rest")  # fmt: skip
        try:
            port = url.port or 80
        except ValueError:
            raise BadRequest(f"bad port in {target[:100]!r}") from None
        host = normal_host(url.hostname)
        if url.username is not None or url.password is not None:
            raise Refused("http", host, port, "credentials in the URI")
        if host_header is not None and host_header != (host, port):
            raise Refused("host_mismatch", host, port,
                          f"the Host header names {hosts[0][:253]!r}")  # fmt: skip
        path = url.path or "/"
        if url.query:
            path += "?" + url.query
        return host, port, path

    async def _forward(
        self,
        client: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: h11.Request,
        host: str,
        port: int,
        path: str,
    ) -> bool:
        """One checked request to its upstream and its response back, both as h11 writes
        them; False: the connection cannot carry another request."""
        up_reader, up_writer = await self._dial("http", host, port)
        upstream = h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_LIMIT)
        named = {n.strip().lower() for name, value in request.headers if name == b"connection"
                 for n in value.decode("latin-1").split(",")}  # fmt: skip
        headers = [(b"host", authority(host, port, 80).encode("ascii"))]
        headers += [(name, value) for name, value in request.headers
                    if name.decode("latin-1") not in _NOT_FORWARDED | named]  # fmt: skip
        headers.append((b"connection", b"close"))
        started = False
        try:
            up_writer.write(upstream.send(h11.Request(method=request.method, target=path,
                                                      headers=headers)))  # fmt: skip
            while True:  # the body, re-framed by h11
                if client.they_are_waiting_for_100_continue:
                    go_on = h11.InformationalResponse(status_code=100, headers=[],
                                                      reason=b"Continue")  # fmt: skip
                    writer.write(client.send(go_on))
                event = await next_event(client, reader, IDLE_TIMEOUT_S)
                if isinstance(event, h11.Data):
                    up_writer.write(upstream.send(h11.Data(data=event.data)))
                    await up_writer.drain()
                elif isinstance(event, h11.EndOfMessage):  # trailers are not forwarded
                    up_writer.write(upstream.send(h11.EndOfMessage()))
                    await up_writer.drain()
                    break
                else:
                    return False  # the client closed mid-body
            while True:  # the response, re-framed by h11
                try:
                    answer = await next_event(upstream, up_reader, IDLE_TIMEOUT_S, strict=False)
                except BadRequest as exc:
                    raise UpstreamFailed(f"{host}:{port} answered badly: {exc}") from None
                if isinstance(answer, h11.InformationalResponse):
                    if answer.status_code != 100:
                        continue  # 102, 103: nothing the client needs
                    writer.write(client.send(answer))
                elif isinstance(answer, h11.Response):
                    started = True
                    kept = [(n, v) for n, v in answer.headers
                            if n.decode("latin-1") not in _NOT_RETURNED]  # fmt: skip
                    relayed = h11.Response(status_code=answer.status_code, headers=kept,
                                           reason=answer.reason)  # fmt: skip
                    writer.write(client.send(relayed))
                elif isinstance(answer, h11.Data):
                    writer.write(client.send(answer))
                elif isinstance(answer, h11.EndOfMessage):
                    writer.write(client.send(h11.EndOfMessage()))
                    await writer.drain()
                    return True
                else:
                    if started:
                        return False  # cut short: the client sees a short body and EOF
                    raise UpstreamFailed(f"{host}:{port} closed without an answer")
                await writer.drain()
        except h11.LocalProtocolError as exc:  # the upstream's answer cannot be re-sent
            if started:
                return False
            raise UpstreamFailed(f"{host}:{port} answered what cannot be relayed: {exc}"
                                 ) from None  # fmt: skip
        except (UpstreamFailed, TimeoutError, OSError):
            if started:
                return False
            raise
        finally:
            up_writer.close()

    async def _dial(
        self, kind: str, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Check (host, port) against the rules and connect to its first passing address."""
        literal = ip_literal(host)
        if literal is not None:
            if not self.rules.literal_allowed(literal, port):
                raise Refused("ip", str(literal), port, "an IP address not on the allow-list")
            addresses = [literal]
        elif not _HOSTNAME.match(host):
            raise Refused(kind, host, port, "not a host name")
        elif not self.rules.name_allowed(host, port):
            raise Refused(kind, host, port, "not on the allow-list")
        if kind == "connect" and port not in self.tls_ports:
            listed = ", ".join(map(str, sorted(self.tls_ports))) or "none"
            raise Refused("connect", host, port,
                          f"CONNECT reaches TLS ports only ({listed}); send plain HTTP as"
                          " a proxy request, where every request is checked")  # fmt: skip
        if literal is None:
            addresses = await resolve(host)
            if not addresses:
                raise UpstreamFailed(f"{host} does not resolve")
        reasons = [self.rules.address_refusal(a, listed=literal is not None) for a in addresses]
        passing = [a for a, reason in zip(addresses, reasons, strict=True) if reason is None]
        if not passing:
            raise Refused("ip", host, port, f"{addresses[0]} is {reasons[0]}")
        error: OSError | None = None
        for address in passing:
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(str(address), port), CONNECT_TIMEOUT_S
                )
            except (OSError, TimeoutError) as exc:
                error = exc if isinstance(exc, OSError) else OSError(str(exc) or "timed out")
        raise UpstreamFailed(f"cannot connect to {host}:{port}: {error}")


async def next_event(
    conn: h11.Connection, reader: asyncio.StreamReader, timeout_s: float, strict: bool = True
) -> h11.Event | type[h11.PAUSED] | type[h11.NEED_DATA]:
    """The next h11 event of `conn`, reading as needed; BadRequest when the peer's bytes
    are refused (by `check_head` first when `strict`, then by h11)."""
    while True:
        if strict and conn.their_state is h11.IDLE:
            check_head(conn.trailing_data[0])
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise BadRequest(f"not HTTP/1.1 as RFC 9112 has it: {exc}",
                             exc.error_status_hint) from None  # fmt: skip
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await asyncio.wait_for(reader.read(64 * 1024), timeout_s))


async def read_at_least(reader: asyncio.StreamReader, data: bytes, size: int) -> bytes:
    """`data` and what follows it until it holds `size` bytes (fewer if the client closes);
    `size` is bounded by the caller (a TLS record is at most 18 KiB)."""
    while len(data) < size:
        chunk = await reader.read(64 * 1024)
        if not chunk:
            break
        data += chunk
    return data


async def respond(writer: asyncio.StreamWriter, status: int, text: str, denied: str = "") -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large",
              501: "Not Implemented", 502: "Bad Gateway"}.get(status, "Error")  # fmt: skip
    body = (text + "\n").encode()
    extra = f"X-Egress-Denied: {denied}\r\n" if denied else ""
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n{extra}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")  # fmt: skip
    with contextlib.suppress(ConnectionError, OSError):
        writer.write(head.encode() + body)
        await writer.drain()


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(64 * 1024):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


# --- DNS ---------------------------------------------------------------------------------

_QTYPES = {1: socket.AF_INET, 28: socket.AF_INET6}  # A, AAAA
NOERROR, SERVFAIL, NXDOMAIN, FORMERR = 0, 2, 3, 1


class Query:
    def __init__(self, data: bytes) -> None:
        """Parse one standard query with one question; ValueError otherwise."""
        if len(data) < 12:
            raise ValueError("shorter than a DNS header")
        self.id, self.flags, qdcount, _, _, _ = struct.unpack("!6H", data[:12])
        if self.flags & 0x8000 or (self.flags >> 11) & 0xF != 0 or qdcount != 1:
            raise ValueError("not a standard query with one question")
        labels, offset = [], 12
        while True:
            if offset >= len(data):
                raise ValueError("the name runs past the datagram")
            length = data[offset]
            offset += 1
            if length == 0:
                break
            if length > 63 or offset + length > len(data):
                raise ValueError("a bad label in the question")
            labels.append(data[offset : offset + length])
            offset += length
        if offset + 4 > len(data) or offset - 12 > 255:
            raise ValueError("a truncated question")
        self.qtype, self.qclass = struct.unpack("!HH", data[offset : offset + 4])
        self.question = data[12 : offset + 4]
        self.name = b".".join(labels).decode("ascii", "backslashreplace").lower()

    def answer(self, rcode: int, addresses: Iterable[IPAddress] = ()) -> bytes:
        records = [struct.pack("!HHHIH", 0xC00C, 28 if a.version == 6 else 1, 1, DNS_TTL_S,
                               len(a.packed)) + a.packed for a in addresses]  # fmt: skip
        flags = 0x8000 | (self.flags & 0x0100) | 0x0080 | rcode  # QR, RD copied, RA
        header = struct.pack("!6H", self.id, flags, 1, len(records), 0, 0)
        return header + self.question + b"".join(records)


class DnsServer:
    def __init__(self, rules: Rules, recorder: Recorder, address: str) -> None:
        self.rules = rules
        self.recorder = recorder
        self.address = address

    async def reply(self, data: bytes) -> bytes | None:
        """The answer to one query (None: not a query, recorded and dropped)."""
        try:
            query = Query(data)
        except ValueError as exc:
            detail = f"a {len(data)}-byte datagram that is no DNS query ({exc})"
            self.recorder.deny("udp", self.address, DNS_PORT, detail)
            return None
        name = query.name
        if query.qclass != 1 or not _HOSTNAME.match(name) or not self.rules.name_allowed(name):
            self.recorder.deny("dns", name, DNS_PORT, "a lookup of a name not on the allow-list")
            return query.answer(NXDOMAIN)
        family = _QTYPES.get(query.qtype)
        if family is None:  # MX, TXT, ...: the name exists, with nothing of that type
            return query.answer(NOERROR)
        found = await resolve(name, family)
        if not found:
            return query.answer(SERVFAIL if family == socket.AF_INET else NOERROR)
        passing = [a for a in found if self.rules.address_refusal(a) is None]
        if not passing:
            self.recorder.deny("ip", name, DNS_PORT,
                               f"{found[0]} is {self.rules.address_refusal(found[0])}")  # fmt: skip
        return query.answer(NOERROR, passing)


class DnsDatagrams(asyncio.DatagramProtocol):
    def __init__(self, server: DnsServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None
        self.pending: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A datagram transport (not every Python's class says so by inheritance).
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        task = asyncio.get_running_loop().create_task(self._answer(data, addr))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _answer(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        answer = await self.server.reply(data)
        if answer is not None and self.transport is not None:
            self.transport.sendto(answer[:512], addr)


async def dns_over_tcp(
    server: DnsServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            length = struct.unpack("!H", await asyncio.wait_for(reader.readexactly(2), 10))[0]
            answer = await server.reply(await asyncio.wait_for(reader.readexactly(length), 10))
            if answer is None:
                break
            writer.write(struct.pack("!H", len(answer)) + answer)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
        pass
    finally:
        writer.close()


# --- main --------------------------------------------------------------------------------


def own_address(network: str) -> str:
    """This container's address on `network` (the sandbox's), found without a packet: a
    UDP socket connected towards the network only picks its source address."""
    subnet = ipaddress.ip_network(network)
    with socket.socket(socket.AF_INET6 if subnet.version == 6 else socket.AF_INET,
                       socket.SOCK_DGRAM) as probe:  # fmt: skip
        probe.connect((str(subnet.network_address + 1), 9))
        address = str(probe.getsockname()[0])
    if ipaddress.ip_address(address) not in subnet:
        raise SystemExit(f"egress-proxy: no address on the sandbox's network {network}")
    return address


async def serve(config: dict[str, Any]) -> None:
    rules = Rules(config)
    recorder = Recorder()
    address = own_address(config["listen"])
    loop = asyncio.get_running_loop()
    proxy = HttpProxy(rules, recorder, config.get("tls_ports", DEFAULT_TLS_PORTS))
    dns = DnsServer(rules, recorder, address)
    http_server = await asyncio.start_server(proxy.handle, address, HTTP_PORT, limit=HEAD_LIMIT)
    dns_tcp = await asyncio.start_server(lambda r, w: dns_over_tcp(dns, r, w), address, DNS_PORT)
    dns_udp, _ = await loop.create_datagram_endpoint(
        lambda: DnsDatagrams(dns), local_addr=(address, DNS_PORT)
    )
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    emit({"ready": True, "address": address, "http_port": HTTP_PORT, "dns_port": DNS_PORT})
    logger.info("listening on %s:%d (HTTP) and %s:%d (DNS); allow %s", address, HTTP_PORT,
                address, DNS_PORT, ", ".join(config["allow"]))  # fmt: skip
    await stop.wait()
    dns_udp.close()
    http_server.close()
    dns_tcp.close()
    emit({"end": True, "denied_count": recorder.count})


def main() -> None:
    # WARNING: only the (bounded) refusals and failures; an idle stderr never fills up.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(name)s %(levelname)s %(message)s")  # fmt: skip
    try:
        config = json.loads(os.environ["EGRESS_CONFIG"])
    except (KeyError, ValueError) as exc:
        raise SystemExit(f"egress-proxy: EGRESS_CONFIG is missing or not JSON: {exc}") from None
    asyncio.run(serve(config))


if __name__ == "__main__":
    main()
