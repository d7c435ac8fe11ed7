"""Network, proven without sending a packet off this machine: what the container sees of
its interfaces, routes and resolver, and a connection attempt to a server this test runs
on the host's 127.0.0.1. A call opted into a network gets it alone."""

from __future__ import annotations

import uuid

import anyio
import pytest

from runner.isolation import ContainerLimits
from tests.abuse.conftest import attack

pytestmark = pytest.mark.anyio


async def test_only_loopback_exists(api):
    hit = await attack(api, "tail -n +3 /proc/net/dev | cut -d: -f1")
    assert hit.content["stdout"].split() == ["lo"]


async def test_no_route_at_all(api):
    hit = await attack(api, "tail -n +2 /proc/net/route; awk '$10 != \"lo\"' /proc/net/ipv6_route")
    assert hit.content["stdout"] == ""


async def test_no_resolver(api):
    hit = await attack(api, "grep -h nameserver /etc/resolv.conf; echo end")
    assert hit.content["stdout"] == "end\n"


async def test_no_ipv6_beyond_loopback(api):
    hit = await attack(api, "awk '{print $6}' /proc/net/if_inet6")
    assert set(hit.content["stdout"].split()) <= {"lo"}


async def test_the_hosts_loopback_server_is_unreachable(api, loopback_server):
    port, accepted = loopback_server
    script = (f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED || echo REFUSED;"
              f" python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)'"
              " 2>&1 | tail -1")  # fmt: skip
    hit = await attack(api, script)
    assert "REFUSED" in hit.content["stdout"]
    assert "Connection refused" in hit.content["stdout"]
    assert accepted == []


async def test_a_network_given_to_one_call_is_that_calls_alone(api, case_runtime):
    name = f"abuse-net-{uuid.uuid4().hex[:8]}"
    api.create_network(name, driver="bridge", internal=True)
    try:
        seen: dict[str, str] = {}

        async def probe(label: str, limits: ContainerLimits | None) -> None:
            hit = await attack(api, "sleep 1; tail -n +3 /proc/net/dev | cut -d: -f1",
                               limits=limits)  # fmt: skip
            # runsc runs with --network=none: a call asking for a network is refused.
            seen[label] = hit.content["stdout"] if hit.outcome.ok else hit.outcome.error_code

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(probe, "opted-in", ContainerLimits(network=name))
            tasks.start_soon(probe, "default", None)
        opted_in = ["eth0", "lo"] if case_runtime == "runc" else ["WORKER_START_FAILED"]
        assert sorted(seen["opted-in"].split()) == opted_in
        assert seen["default"].split() == ["lo"]
    finally:
        api.remove_network(name)
    assert api.networks(names=[name]) == []
