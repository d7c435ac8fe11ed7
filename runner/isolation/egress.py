"""Default-deny egress with an allow-list: `EgressPolicy`, and the gateway of one call.

Without a policy a sandbox has no network at all (`network: none`). With one, each call
gets a gateway of its own, made before its sandbox and removed with it:

  sandbox --(internal network, no route out)--> egress proxy --(upstream network)--> host

- an internal Docker network (`--internal`, and no IPv4 address of the host on its
  bridge, so the host cannot be reached through it either), made for this call only: no
  other call's sandbox is ever on it;
- the egress proxy (images/egress-proxy, run hardened like the sandbox) attached to that
  network and to the upstream network the operator names. It is the sandbox's resolver
  (the container's `dns`) and its HTTP(S) proxy (HTTP_PROXY and friends); it answers DNS
  for allowed names only and proxies CONNECT (to TLS ports only, a tunnel that opens
  with a TLS ClientHello) and plain HTTP (every request checked, parsed by h11) to
  allowed `host:port`s whose addresses pass its address rule (see the proxy's docstring).
- no IPv6 on the sandbox's side: the internal network is made with IPv6 off and the
  sandbox runs with net.ipv6.conf.all.disable_ipv6=1 (no link-local or loopback IPv6
  address either); so does the proxy, unless the operator's upstream network has IPv6
  (the proxy's address rule judges IPv6 addresses as it does IPv4 ones).

The proxy writes each refusal as a JSON line on its stdout; after the call the runner
stops it, reads them back into runner_info["egress_denied"] (at most MAX_DENIED, with
"egress_denied_count") and logs each one here. A warm container (pool.py) gets its
gateway when it is made, so a pooled call pays nothing more.

The upstream network is never guessed: EgressPolicy(upstream_network=...) (the commands
fill it from the spec, --egress-network or $AGENTS_RUNNER_EGRESS_NETWORK), else the call
fails to start (WORKER_START_FAILED) saying so. Docker's default bridge ("bridge") is the
way to the internet, and must be named.

Networks and proxies carry the owner labels of containers.py: `sweep_networks` removes
the networks of dead owners after the container sweep removed their proxies. Everything
here blocks (docker SDK): call it from a worker thread.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import re
import selectors
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.types import LogConfig, Ulimit

from envelopes.controls import escape_controls
from runner.isolation.containers import (
    DEFAULT_SECCOMP_PROFILE,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_OWNER_HOST,
    labels_for,
    owner_alive,
    seccomp_option,
)

logger = logging.getLogger(__name__)

EGRESS_PROXY_IMAGE = "agents-runner/egress-proxy:latest"
#: The variable the commands read for a policy's upstream network (runner/cli/settings.py):
#: named in the message of a call whose policy names none; never read here.
EGRESS_NETWORK_ENV = "AGENTS_RUNNER_EGRESS_NETWORK"
#: Refusal records a call keeps (all are counted).
MAX_DENIED = 100
PROXY_HTTP_PORT = 3128
#: The ports a CONNECT tunnel may reach unless the policy names others.
DEFAULT_TLS_PORTS = (443,)
#: Inside the sandbox and the proxy: no IPv6 address at all, loopback and link-local too.
NO_IPV6_SYSCTLS = MappingProxyType(
    {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
)
NETWORK_PREFIX = "agents-runner-egress-"
#: How long the proxy may take to listen, and to hand over its records at the end.
READY_TIMEOUT_S = 15.0
COLLECT_TIMEOUT_S = 5.0
_COLLECT_CAP = 1024 * 1024
MiB = 1024 * 1024
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")
_EXAMPLES = "examples: packages.example.test:443, *.corp.example:443, 10.0.0.5:8080"


class EgressError(Exception):
    """The gateway of a call could not be made; the call fails to start."""


def parse_allow_entry(entry: str) -> tuple[str, int]:
    """`host:port`, `*.domain:port`, `IPv4:port` or `[IPv6]:port` -> (host, port), the
    host lowercased without a trailing dot; ValueError saying what is wrong."""
    text = entry.strip().lower()
    if text.startswith("["):
        host, sep, port_text = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"{entry!r} is not [IPv6]:PORT")
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or ":" in host:
            raise ValueError(f"{entry!r} is not HOST:PORT ({_EXAMPLES})")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
    host = host.rstrip(".")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        if _never_dialled(address):
            raise ValueError(f"{entry!r}: {address} is a loopback, link-local, multicast or"
                             " reserved address, which the proxy never dials")  # fmt: skip
    elif text.startswith("["):
        raise ValueError(f"{entry!r}: {host!r} is not an IPv6 address")
    else:
        name = host[2:] if host.startswith("*.") else host
        if not _HOSTNAME.fullmatch(name):
            raise ValueError(f"{entry!r}: {host!r} is not a host name, *.domain or IP"
                             f" address ({_EXAMPLES})")  # fmt: skip
    return host, int(port_text)


def _never_dialled(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return (address.is_loopback or address.is_link_local or address.is_multicast
            or address.is_unspecified or address.is_reserved)  # fmt: skip


@dataclass(frozen=True)
class EgressPolicy:
    """The only network a sandbox gets besides none: `allow` lists `host:port` (exact
    name), `*.domain:port` (any name under domain, not domain itself) and `IP:port`
    (an address the client may ask for as it is; other IP literals are refused).

    `upstream_network`: the Docker network the proxy reaches the allowed hosts through
    (None: the call fails to start, saying so; "bridge" is Docker's default route out;
    the commands fill it from --egress-network or $AGENTS_RUNNER_EGRESS_NETWORK).
    `allow_addresses`: CIDR ranges of private addresses allowed names may resolve to
    besides the upstream network's own (global addresses always may; loopback,
    link-local and the like never).
    `tls_ports`: the ports CONNECT may reach (443 by default); a tunnel carries TLS only,
    so plain HTTP to any port goes as a proxy request, where every request is checked.
    An allowed `host:port` whose port is not here is reached by plain HTTP only."""

    allow: tuple[str, ...]
    upstream_network: str | None = None
    allow_addresses: tuple[str, ...] = ()
    proxy_image: str = EGRESS_PROXY_IMAGE
    tls_ports: tuple[int, ...] = DEFAULT_TLS_PORTS

    def __post_init__(self) -> None:
        entries: object = self.allow  # callers may pass a list (or, by mistake, a str)
        if isinstance(entries, str) or not isinstance(entries, tuple | list):
            raise ValueError("EgressPolicy.allow must be a list of HOST:PORT entries")
        if not entries:
            raise ValueError("EgressPolicy.allow is empty: leave egress unset for no network")
        normal = []
        for index, entry in enumerate(entries):
            if not isinstance(entry, str):
                raise ValueError(f"EgressPolicy.allow[{index}] must be a string, got {entry!r}")
            try:
                host, port = parse_allow_entry(entry)
            except ValueError as exc:
                raise ValueError(f"EgressPolicy.allow[{index}]: {exc}") from None
            normal.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        object.__setattr__(self, "allow", tuple(dict.fromkeys(normal)))
        ranges = []
        for index, text in enumerate(self.allow_addresses):
            try:
                network = ipaddress.ip_network(str(text), strict=False)
            except ValueError:
                raise ValueError(f"EgressPolicy.allow_addresses[{index}]: {text!r} is not an"
                                 " address range such as 10.0.0.0/8") from None  # fmt: skip
            if _never_dialled(network.network_address):
                raise ValueError(f"EgressPolicy.allow_addresses[{index}]: {network} is a"
                                 " range the proxy never dials")  # fmt: skip
            ranges.append(str(network))
        object.__setattr__(self, "allow_addresses", tuple(ranges))
        ports: object = self.tls_ports
        if isinstance(ports, str) or not isinstance(ports, tuple | list):
            raise ValueError("EgressPolicy.tls_ports must be a list of port numbers")
        for index, port in enumerate(ports):
            if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
                raise ValueError(f"EgressPolicy.tls_ports[{index}]: {port!r} is not a port"
                                 " number from 1 to 65535")  # fmt: skip
        object.__setattr__(self, "tls_ports", tuple(sorted(set(ports))))
        upstream = self.upstream_network
        if upstream is not None and (
            not upstream or upstream in ("none", "host") or upstream.startswith("container:")
        ):
            raise ValueError(
                f"EgressPolicy.upstream_network must name a Docker network the"
                f" proxy can join (not none, host or container:), got {upstream!r}"
            )
        if not self.proxy_image:
            raise ValueError("EgressPolicy.proxy_image must name an image")

    def upstream(self) -> str | None:
        """The upstream network of a call (None: none was given)."""
        return self.upstream_network

    def info(self) -> dict[str, Any]:
        return {"mode": "egress", "allow": list(self.allow), "upstream": self.upstream()}


def network_info(network: str, egress: EgressPolicy | None) -> dict[str, Any]:
    """runner_info["network"] of a Docker call."""
    if egress is not None:
        return egress.info()
    if network in ("none", "host"):
        return {"mode": network}
    return {"mode": "network", "name": network}


# --- the gateway of one call ---------------------------------------------------------------


@dataclass
class Gateway:
    """A call's internal network and egress proxy; `close()` removes both."""

    api: docker.APIClient
    network_id: str
    network_name: str
    proxy_id: str = ""
    proxy_address: str = ""
    sock: socket.socket | None = None
    #: What the proxy wrote so far (multiplexed stream) and its stderr, for diagnostics.
    pending: bytearray = field(default_factory=bytearray)
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    eof: bool = False

    def configure(self, host_config: dict[str, Any], env: dict[str, str]) -> None:
        """Put a sandbox's host config and environment on this gateway."""
        host_config["NetworkMode"] = self.network_name
        host_config["Sysctls"] = {**(host_config.get("Sysctls") or {}), **NO_IPV6_SYSCTLS}
        host_config["Dns"] = [self.proxy_address]
        host_config["DnsSearch"] = []
        proxy = f"http://{self.proxy_address}:{PROXY_HTTP_PORT}"
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env[name] = proxy
        env["NO_PROXY"] = env["no_proxy"] = ""

    def collect(self, runner_info: dict[str, Any]) -> None:
        """Stop the proxy and read its refusals into runner_info (blocking, bounded)."""
        with contextlib.suppress(docker.errors.APIError):  # it may have exited already
            self.api.kill(self.proxy_id, signal="SIGTERM")
        self._read(lambda: self.eof, COLLECT_TIMEOUT_S)
        denied: list[dict[str, Any]] = []
        count: int | None = None
        for line in self.stdout.decode("utf-8", "replace").splitlines():
            try:
                document = json.loads(line)
            except ValueError:
                continue
            if isinstance(document.get("denied"), dict) and len(denied) < MAX_DENIED:
                record = document["denied"]
                denied.append(record)
                # The host is the sandbox's words: escaped, it cannot drive a terminal.
                what = (f"{record.get('kind')} {record.get('host')}:{record.get('port')}:"
                        f" {record.get('detail')}")  # fmt: skip
                logger.warning("egress denied (proxy %s): %s", self.proxy_id[:12],
                               escape_controls(what))  # fmt: skip
            elif document.get("end"):
                count = int(document.get("denied_count", 0))
        if count is None:
            logger.warning("egress proxy %s ended without its final count (stderr: %s)",
                           self.proxy_id[:12], self.stderr_tail())  # fmt: skip
            runner_info["egress_proxy_error"] = "the proxy ended without its final count"
            count = len(denied)
        runner_info["egress_denied"] = denied
        runner_info["egress_denied_count"] = max(count, len(denied))

    def close(self) -> None:
        """Remove the proxy and the network (blocking); what is gone already is fine."""
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
            self.sock.close()
            self.sock = None
        try:
            if self.proxy_id:
                with contextlib.suppress(docker.errors.NotFound):
                    self.api.remove_container(self.proxy_id, force=True)
            with contextlib.suppress(docker.errors.NotFound):
                self.api.remove_network(self.network_id)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            logger.warning("egress gateway %s: not removed (%s); the sweeper removes it later",
                           self.network_name, exc)  # fmt: skip
            return
        logger.debug("removed egress gateway %s", self.network_name)

    def stderr_tail(self) -> str:
        return self.stderr[-2000:].decode("utf-8", "replace").strip() or "empty"

    def _read(self, done: Callable[[], bool], timeout_s: float) -> None:
        """Demultiplex the proxy's attach stream until `done()` or EOF or the timeout."""
        if self.sock is None:
            return
        deadline = time.monotonic() + timeout_s
        self.sock.setblocking(False)
        with selectors.DefaultSelector() as selector:
            selector.register(self.sock, selectors.EVENT_READ)
            while not done() and not self.eof:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or len(self.stdout) + len(self.stderr) > _COLLECT_CAP:
                    return
                if not selector.select(remaining):
                    continue
                try:
                    chunk = self.sock.recv(64 * 1024)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    self.eof = True
                    return
                self.pending += chunk
                while len(self.pending) >= 8:
                    length = int.from_bytes(self.pending[4:8], "big")
                    if len(self.pending) < 8 + length:
                        break
                    target = self.stdout if self.pending[0] == 1 else self.stderr
                    target += self.pending[8 : 8 + length]
                    del self.pending[: 8 + length]


def open_gateway(
    api: docker.APIClient, policy: EgressPolicy, call_label: str, runtime: str = "runc"
) -> Gateway:
    """Make a call's internal network and start its proxy (blocking); EgressError says
    why not, and nothing is left behind."""
    if runtime == "runsc":
        raise EgressError(
            "an egress policy cannot run under runsc: the engine registers gVisor with"
            " --network=none, so a runsc sandbox has no interface to reach its egress proxy;"
            " use runtime runc for calls with egress, or no egress under runsc"
        )
    upstream = policy.upstream()
    if upstream is None:
        raise EgressError(
            "an egress policy needs an upstream network, the Docker network its proxy reaches"
            f" the allowed hosts through: set EgressPolicy(upstream_network=...), the spec's"
            f' egress "network", --egress-network, or ${EGRESS_NETWORK_ENV}'
            ' ("bridge" is Docker\'s default route out; it is never chosen silently)'
        )
    up_subnets, up_gateways = _upstream_addresses(api, upstream)
    name = NETWORK_PREFIX + uuid.uuid4().hex[:12]
    try:
        created = api.create_network(
            name,
            driver="bridge",
            internal=True,
            enable_ipv6=False,  # said, not left to the engine's default
            check_duplicate=True,
            # No address of the host on this bridge: the sandbox cannot reach the host.
            options={"com.docker.network.bridge.inhibit_ipv4": "true"},
            labels=labels_for(call_label, role="egress-network"),
        )
    except docker.errors.APIError as exc:
        hint = ""
        if "address pool" in str(exc.explanation) or "overlap" in str(exc.explanation):
            hint = (" (the engine ran out of network ranges: each call with egress has its"
                    " own network; widen default-address-pools in daemon.json)")  # fmt: skip
        raise EgressError(f"cannot create the call's internal network: {exc.explanation}"
                          f"{hint}") from None  # fmt: skip
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EgressError(f"cannot reach the Docker engine: {exc}") from None
    gateway = Gateway(api, created["Id"], name)
    try:
        subnet = _subnet(api.inspect_network(created["Id"]), name)
        config = {
            "allow": list(policy.allow),
            "listen": subnet,
            # Never dialled: the sandbox's network and the host's address on the upstream.
            "refuse": [subnet, *(f"{g}/{32 if ':' not in g else 128}" for g in up_gateways)],
            "private": [*up_subnets, *policy.allow_addresses],
            "tls_ports": list(policy.tls_ports),
        }
        # IPv6 stays off in the proxy unless the operator's upstream network has it; the
        # sandbox's side never has it (the sandbox has none, nor does this network).
        ipv6_upstream = any(":" in subnet for subnet in up_subnets)
        _start_proxy(api, gateway, policy, upstream, config, call_label, ipv6_upstream)
    except BaseException:
        gateway.close()
        raise
    logger.debug("call %s: egress gateway %s, proxy %s at %s, upstream %s", call_label, name,
                 gateway.proxy_id[:12], gateway.proxy_address, upstream)  # fmt: skip
    return gateway


def _upstream_addresses(api: docker.APIClient, upstream: str) -> tuple[list[str], list[str]]:
    """The upstream network's subnets and gateways; EgressError when it is unusable."""
    try:
        network = api.inspect_network(upstream)
    except docker.errors.NotFound:
        raise EgressError(
            f"the egress upstream network {upstream!r} does not exist on this"
            f" engine (create it: docker network create {upstream})"
        ) from None
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EgressError(f"cannot inspect the egress upstream network {upstream!r}: {exc}"
                          ) from None  # fmt: skip
    if network.get("Driver") in ("host", "null"):
        raise EgressError(
            f"the egress upstream network {upstream!r} is the engine's"
            f" {network['Driver']!r} network, which a proxy cannot share"
        )
    configs = (network.get("IPAM") or {}).get("Config") or []
    subnets = [c["Subnet"] for c in configs if c.get("Subnet")]
    gateways = [c["Gateway"].split("/")[0] for c in configs if c.get("Gateway")]
    return subnets, gateways


def _subnet(network: dict[str, Any], name: str) -> str:
    for config in (network.get("IPAM") or {}).get("Config") or []:
        if config.get("Subnet") and ":" not in config["Subnet"]:
            return str(config["Subnet"])
    raise EgressError(f"the engine gave the internal network {name} no IPv4 subnet")


def _start_proxy(
    api: docker.APIClient,
    gateway: Gateway,
    policy: EgressPolicy,
    upstream: str,
    config: dict[str, Any],
    call_label: str,
    ipv6_upstream: bool = False,
) -> None:
    """Create the proxy on the internal network, join it to the upstream, start it and
    wait for its ready line (its address on the internal network)."""
    try:
        created = api.create_container(
            policy.proxy_image,
            user="10002:10002",
            environment={"EGRESS_CONFIG": json.dumps(config)},
            hostname="egress-proxy",
            labels=labels_for(call_label, role="egress-proxy"),
            host_config=_proxy_host_config(api, gateway.network_name, ipv6_upstream),
        )
    except docker.errors.ImageNotFound:
        raise EgressError(
            f"the egress proxy image {policy.proxy_image!r} is not on this"
            " engine (build it: scripts/build-images egress-proxy)"
        ) from None
    except docker.errors.APIError as exc:
        raise EgressError(f"the engine refused the egress proxy: {exc.explanation}") from None
    gateway.proxy_id = created["Id"]
    if created.get("Warnings"):
        raise EgressError("the engine would not apply every limit of the egress proxy: "
                          + "; ".join(created["Warnings"]))  # fmt: skip
    try:
        api.connect_container_to_network(gateway.proxy_id, upstream)
        attached = api.attach_socket(gateway.proxy_id,
                                     params={"stdout": 1, "stderr": 1, "stream": 1})  # fmt: skip
        gateway.sock = attached._sock
        api.start(gateway.proxy_id)
    except docker.errors.APIError as exc:
        raise EgressError(f"the egress proxy did not start: {exc.explanation}") from None
    gateway._read(lambda: b"\n" in gateway.stdout, READY_TIMEOUT_S)
    first, _, rest = bytes(gateway.stdout).partition(b"\n")
    try:
        ready = json.loads(first)
        gateway.proxy_address = str(ipaddress.ip_address(ready["address"]))
    except (ValueError, KeyError, TypeError):
        raise EgressError(f"the egress proxy did not become ready (its stderr:"
                          f" {gateway.stderr_tail()})") from None  # fmt: skip
    gateway.stdout = bytearray(rest)


def _proxy_host_config(
    api: docker.APIClient, network: str, ipv6_upstream: bool = False
) -> dict[str, Any]:
    """The proxy's sandbox: as strict as a worker's, less what serving needs (a port
    below 1024 for DNS, by the namespaced sysctl, not a capability). IPv6 is disabled
    in it unless the upstream network has IPv6 (its address rule judges IPv6 too)."""
    config: dict[str, Any] = api.create_host_config(
        network_mode=network,
        read_only=True,
        tmpfs={"/tmp": "rw,nosuid,nodev,noexec,size=1048576,mode=1777"},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges", _proxy_seccomp()],
        mem_limit=64 * MiB,
        memswap_limit=64 * MiB,
        nano_cpus=int(0.5e9),
        pids_limit=64,
        ulimits=[Ulimit(name="nofile", soft=1024, hard=1024), Ulimit(name="core", soft=0, hard=0)],
        sysctls={
            "net.ipv4.ip_unprivileged_port_start": "53",
            "net.ipv4.ip_forward": "0",
            **({} if ipv6_upstream else NO_IPV6_SYSCTLS),
        },
        init=True,
        ipc_mode="private",
        log_config=LogConfig(type="none"),
        privileged=False,
        runtime="runc",
    )
    return config


def _proxy_seccomp() -> str:
    """The proxy always runs under our profile (never the engine's default)."""
    try:
        return seccomp_option(DEFAULT_SECCOMP_PROFILE)
    except (OSError, ValueError) as exc:
        raise EgressError(
            f"cannot use the seccomp profile {DEFAULT_SECCOMP_PROFILE}: {exc}"
        ) from None


# --- the sweep -----------------------------------------------------------------------------


def sweep_networks(api: docker.APIClient, *, everything: bool = False) -> list[str]:
    """Remove egress networks whose owner on this machine is gone (every one with
    `everything`); run after the container sweep, which removes their proxies."""
    host = socket.gethostname()
    removed = []
    for network in api.networks(filters={"label": f"{LABEL_MANAGED}=1"}):
        labels = network.get("Labels") or {}
        orphaned = labels.get(LABEL_OWNER_HOST) == host and not owner_alive(
            labels.get(LABEL_OWNER, "")
        )
        if not (everything or orphaned):
            continue
        try:
            api.remove_network(network["Id"])
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError as exc:  # a container of a live owner is still on it
            logger.warning("sweep: network %s not removed: %s", network["Name"],
                           exc.explanation)  # fmt: skip
            continue
        logger.info("sweep: removed network %s (owner %s)", network["Name"],
                    labels.get(LABEL_OWNER, "?"))  # fmt: skip
        removed.append(network["Name"])
    return removed
