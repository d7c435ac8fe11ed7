"""egress-proxy: the one exit of a sandbox whose call has an egress policy.

runner/isolation/egress.py starts one per call, in a hardened container attached to the
call's internal network (where the sandbox is, with no route out) and to the upstream
network the operator named. It listens on its internal address only:

- port 3128, an HTTP proxy: `CONNECT host:port` (a raw tunnel: TLS needs no help) and
  plain `GET http://host/...` by its Host. A target passes when its name (or IP literal)
  is on the allow-list with that port AND every address it is dialled at passes the
  address rule (`Rules.address_refusal`): never loopback, link-local (cloud metadata),
  multicast, reserved, the sandbox's own network or the host's gateways; a private
  address only inside the upstream network or a range the operator listed. A plain
  request whose Host header differs from its absolute URI is refused, and one request
  is served per connection, so a second request cannot ride on a checked one.
- port 53 (UDP and TCP), DNS: A and AAAA answers for allowed names only; every other
  name is NXDOMAIN and never forwarded anywhere (no exfiltration by lookup).

Every refusal is written to stdout as one JSON line `{"denied": {"at_ms", "kind", "host",
"port", "detail"}}` (the first MAX_RECORDS of them; all are counted) and logged through
the `egress-proxy` logger on stderr. Stdout's first line is `{"ready": ...}` once it
listens; on SIGTERM it writes `{"end": true, "denied_count": N}` and exits. The runner
reads these back into the call's runner_info["egress_denied"].

Configuration: the JSON document in $EGRESS_CONFIG (egress.py's `proxy_config`).
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

logger = logging.getLogger("egress-proxy")

HTTP_PORT = 3128
DNS_PORT = 53
#: Refusal records written to stdout; later ones are only counted.
MAX_RECORDS = 100
#: A request head larger than this is refused.
HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
#: Connections served at once (the container's open-file limit is 1024).
MAX_CONNECTIONS = 256
DNS_TTL_S = 30
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
               "proxy-authenticate", "te", "trailer", "upgrade"}  # fmt: skip

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


class Refused(Exception):
    """The rules said no: recorded, and answered 403."""

    def __init__(self, kind: str, host: str, port: int, detail: str) -> None:
        super().__init__(detail)
        self.kind, self.host, self.port, self.detail = kind, host, port, detail


class UpstreamFailed(ConnectionError):
    """Allowed, but the upstream cannot be resolved or reached: answered 502."""


class BadRequest(Exception):
    pass


class HttpProxy:
    def __init__(self, rules: Rules, recorder: Recorder) -> None:
        self.rules = rules
        self.recorder = recorder
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
                await respond(writer, 400, str(exc))
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
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            raise BadRequest(f"the request head is over {HEAD_LIMIT} bytes") from None
        method, target, version, headers = parse_head(head)
        if method == "CONNECT":
            authority = split_authority(target)
            if authority is None:
                raise BadRequest(f"CONNECT needs host:port, got {target[:100]!r}")
            host, port = authority
            upstream = await self._dial("connect", host, port)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await relay(reader, writer, *upstream)
            return
        host, port, path = self._plain_target(target, headers)
        up_reader, up_writer = await self._dial("http", host, port)
        try:
            up_writer.write(forwarded_head(method, path, version, headers))
            await send_body(reader, up_writer, headers)
            await up_writer.drain()
            # One request per connection: nothing more is read from the client, so no
            # second request can follow the checked one to the same upstream.
            await pipe(up_reader, writer)
        finally:
            up_writer.close()

    def _plain_target(self, target: str, headers: list[tuple[str, str]]) -> tuple[str, int, str]:
        hosts = [value for name, value in headers if name == "host"]
        if len(hosts) > 1:
            raise Refused("host_mismatch", hosts[0][:253], 0, "more than one Host header")
        host_header = split_authority(hosts[0], 80) if hosts else None
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
        else:
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


def parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest(f"not an HTTP/1.x request line: {lines[0][:100]!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        if line[0] in " \t":
            raise BadRequest("folded header lines are refused")
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(f"malformed header line {line[:100]!r}")
        headers.append((name.lower(), value.strip()))
    return parts[0], parts[1], parts[2], headers


def forwarded_head(method: str, path: str, version: str, headers: list[tuple[str, str]]) -> bytes:
    named = {n.strip().lower() for name, value in headers if name == "connection"
             for n in value.split(",")}  # fmt: skip
    lines = [f"{method} {path} {version}"]
    for name, value in headers:
        if name not in _HOP_BY_HOP and name not in named:
            lines.append(f"{name}: {value}")
    lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def send_body(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, headers: list[tuple[str, str]]
) -> None:
    """The request body by its Content-Length (chunked request bodies are refused)."""
    if any(name == "transfer-encoding" for name, _ in headers):
        raise BadRequest("chunked request bodies are not proxied; send a Content-Length")
    lengths = {value for name, value in headers if name == "content-length"}
    if not lengths:
        return
    if len(lengths) > 1 or not next(iter(lengths)).isdigit():
        raise BadRequest("a bad or repeated Content-Length")
    remaining = int(next(iter(lengths)))
    while remaining:
        chunk = await reader.read(min(remaining, 64 * 1024))
        if not chunk:
            raise asyncio.IncompleteReadError(b"", remaining)
        writer.write(chunk)
        await writer.drain()
        remaining -= len(chunk)


async def respond(writer: asyncio.StreamWriter, status: int, text: str, denied: str = "") -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}.get(status, "Error")
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


async def relay(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    try:
        await asyncio.gather(pipe(client_reader, up_writer), pipe(up_reader, client_writer))
    finally:
        up_writer.close()


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
    proxy = HttpProxy(rules, recorder)
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
