"""No IPv6 on a call's egress gateway (issue 23, item 8).

The proxy's address rules are written for what it dials; a sandbox with an IPv6 address
(link-local on its interface, or a global one should the engine's defaults give networks
IPv6) would have a second family to try. On c574872 the per-call network left IPv6 to the
engine's default and the containers to the engine's sysctls; now the network is made with
IPv6 off and the sandbox and the proxy run with `net.ipv6.conf.*.disable_ipv6=1`. These
tests look at the engine's record of the network and the containers, and at what the
sandbox sees from inside.

Only networks this module creates are used (an internal one as the upstream).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from runner.isolation import ContainerLimits, DockerRunner, EgressPolicy
from runner.isolation.containers import LABEL_MANAGED, LABEL_OWNER, LABEL_ROLE, my_owner_token
from runner.isolation.egress import EGRESS_PROXY_IMAGE, NETWORK_PREFIX, open_gateway
from tests.conftest import make_request
from tests.docker.conftest import BASH_IMAGE, engine_with

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

NO_IPV6 = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}

#: What the sandbox sees: its sysctls, its IPv6 addresses, and whether ::1 can be used.
INSIDE = r"""
import json, os, socket, time
seen = {}
for name in ("all", "default", "lo", "eth0"):
    path = f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6"
    seen[name] = open(path).read().strip() if os.path.exists(path) else "absent"
seen["if_inet6"] = open("/proc/net/if_inet6").read() if os.path.exists("/proc/net/if_inet6") else ""
try:
    socket.socket(socket.AF_INET6, socket.SOCK_STREAM).bind(("::1", 0))
    seen["bind_v6_loopback"] = "bound"
except OSError as exc:
    seen["bind_v6_loopback"] = exc.errno
time.sleep(3)  # while the test inspects this container and its network
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def api() -> docker.APIClient:
    return engine_with(BASH_IMAGE, EGRESS_PROXY_IMAGE)


@pytest.fixture(scope="module")
def upstream(api: docker.APIClient) -> Iterator[str]:
    name = f"ipv6-test-{uuid.uuid4().hex[:8]}"
    api.create_network(name, driver="bridge", internal=True,
                       labels={"io.agents-runner.test": "ipv6"})  # fmt: skip
    try:
        yield name
    finally:
        api.remove_network(name)


def test_the_gateway_network_and_proxy_have_ipv6_off(api, upstream):
    policy = EgressPolicy(("allowed.test:80",), upstream_network=upstream)
    gateway = open_gateway(api, policy, f"ipv6-{uuid.uuid4().hex[:8]}")
    try:
        network = api.inspect_network(gateway.network_id)
        assert network["EnableIPv6"] is False
        assert all(":" not in c["Subnet"] for c in network["IPAM"]["Config"])
        proxy = api.inspect_container(gateway.proxy_id)
        assert NO_IPV6.items() <= (proxy["HostConfig"].get("Sysctls") or {}).items()
        assert all(not n.get("GlobalIPv6Address") and not n.get("LinkLocalIPv6Address")
                   for n in proxy["NetworkSettings"]["Networks"].values())  # fmt: skip
        run = api.exec_create(gateway.proxy_id, ["python3", "-c", (
            "import os; print(open('/proc/sys/net/ipv6/conf/all/disable_ipv6').read().strip(),"
            " os.path.exists('/proc/net/if_inet6') and open('/proc/net/if_inet6').read() != '')"
        )])  # fmt: skip
        assert api.exec_start(run["Id"]).decode().split() == ["1", "False"]
    finally:
        gateway.close()


async def test_the_sandbox_has_no_ipv6(api, upstream):
    mine = [f"{LABEL_MANAGED}=1", f"{LABEL_OWNER}={my_owner_token()}"]
    looked: dict[str, Any] = {}
    stop = threading.Event()

    def watch() -> None:
        """The engine's record of the running sandbox and of its network."""
        while not stop.is_set() and not looked:
            for summary in api.containers(filters={"label": [*mine, f"{LABEL_ROLE}=call"]}):
                try:
                    sandbox = api.inspect_container(summary["Id"])
                    mode = sandbox["HostConfig"]["NetworkMode"]
                    if not mode.startswith(NETWORK_PREFIX):
                        continue
                    looked.update(sysctls=sandbox["HostConfig"].get("Sysctls") or {},
                                  network=api.inspect_network(mode))  # fmt: skip
                except docker.errors.NotFound:
                    continue
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    limits = ContainerLimits(egress=EgressPolicy(("allowed.test:80",), upstream_network=upstream))
    script = f"python3 - <<'PY'\n{INSIDE}\nPY\n"
    try:
        async with DockerRunner(BASH_IMAGE, limits) as runner:
            outcome = await runner.call(make_request("bash", {"script": script}, seconds=60))
    finally:
        stop.set()
        watcher.join()
    assert outcome.ok, outcome.to_dict()
    seen = json.loads(outcome.result.output.content["stdout"].splitlines()[-1])
    assert {k: seen[k] for k in ("all", "default", "lo", "eth0")} == dict.fromkeys(
        ("all", "default", "lo", "eth0"), "1")  # fmt: skip
    assert seen["if_inet6"] == ""
    assert seen["bind_v6_loopback"] != "bound"
    assert looked, "the sandbox was never seen running"
    assert NO_IPV6.items() <= looked["sysctls"].items()
    assert looked["network"]["EnableIPv6"] is False


def test_a_dual_stack_upstream_keeps_ipv6_off_the_sandbox_side(api):
    """An operator's upstream with IPv6: the proxy may dial it there (its address rule
    judges IPv6), but the call's own network still has none."""
    name = f"ipv6-test-{uuid.uuid4().hex[:8]}"
    api.create_network(name, driver="bridge", internal=True, enable_ipv6=True,
                       ipam=docker.types.IPAMConfig(pool_configs=[
                           docker.types.IPAMPool(subnet="fd00:5eed:23::/64")]),
                       labels={"io.agents-runner.test": "ipv6"})  # fmt: skip
    try:
        policy = EgressPolicy(("allowed.test:80",), upstream_network=name)
        gateway = open_gateway(api, policy, f"ipv6-{uuid.uuid4().hex[:8]}")
        try:
            assert api.inspect_network(gateway.network_id)["EnableIPv6"] is False
            proxy = api.inspect_container(gateway.proxy_id)
            sysctls = proxy["HostConfig"].get("Sysctls") or {}
            assert "net.ipv6.conf.all.disable_ipv6" not in sysctls
            networks = proxy["NetworkSettings"]["Networks"]
            assert networks[name]["GlobalIPv6Address"].startswith("fd00:5eed:23:")
            assert networks[gateway.network_name]["GlobalIPv6Address"] == ""
        finally:
            gateway.close()
    finally:
        api.remove_network(name)
