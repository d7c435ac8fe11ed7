"""Containment through the bash-runner image with the default limits: what a script
sees from inside proves the sandbox. No packet goes to any address off this machine:
the network probes target a server this test runs on the host's loopback."""

from __future__ import annotations

import time

import pytest

from runner.isolation import CallOutcome, ContainerLimits, DockerRunner
from tests.conftest import make_request
from tests.docker.conftest import BASH_IMAGE, labelled_containers

pytestmark = pytest.mark.anyio
MiB = 1024 * 1024


async def bash(api, script: str, limits: ContainerLimits | None = None,
               seconds: float = 30) -> CallOutcome:  # fmt: skip
    runner = DockerRunner(BASH_IMAGE, limits, api=api)
    return await runner.call(make_request(arguments={"script": script}, seconds=seconds,
                                          max_result_bytes=256 * 1024))  # fmt: skip


def content(outcome: CallOutcome) -> dict:
    assert outcome.ok, (outcome.result, outcome.stderr_tail)
    return outcome.result.output.content


PROBE = "exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED || echo REFUSED"


async def test_hello_as_non_root(api):
    result = content(await bash(api, "echo hi; id -u"))
    out = result["stdout"].split()
    assert out[0] == "hi" and out[1] != "0"
    assert result["exit_code"] == 0


async def test_no_network_only_loopback(api, loopback_server):
    script = ("ls /sys/class/net; echo ---; tail -n +2 /proc/net/route; echo ---;"
              " grep -c nameserver /etc/resolv.conf || true; echo ---;"
              " cat /proc/net/if_inet6 2>/dev/null | awk '{print $6}'; echo ---; "
              + PROBE.format(port=loopback_server[0]))  # fmt: skip
    sections = content(await bash(api, script))["stdout"].split("---\n")
    assert sections[0].split() == ["lo"]
    assert sections[1].strip() == "", "no route at all"
    assert sections[2].strip() in ("0", ""), "no resolver configured"
    assert set(sections[3].split()) <= {"lo"}, "no IPv6 beyond loopback"
    assert "REFUSED" in sections[4]


async def test_probe_detects_a_network_when_one_is_given(api, loopback_server):
    # Positive control for the probe above: opted into the host's network explicitly,
    # the same script reaches the test's loopback server.
    limits = ContainerLimits(network="host")
    result = content(await bash(api, PROBE.format(port=loopback_server[0]), limits))
    assert "CONNECTED" in result["stdout"]


async def test_read_only_root_and_writable_tmp(api):
    script = ("touch /x 2>&1; touch /etc/x 2>&1; touch /usr/x 2>&1; echo data > /tmp/ok &&"
              " cat /tmp/ok")  # fmt: skip
    result = content(await bash(api, script))
    assert result["stdout"].count("Read-only file system") == 3
    assert result["stdout"].strip().endswith("data")


async def test_no_capabilities_no_new_privileges(api):
    script = "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Uid)' /proc/self/status"
    lines = dict(
        line.split(":", 1) for line in content(await bash(api, script))["stdout"].splitlines()
    )
    assert int(lines["CapEff"], 16) == 0 and int(lines["CapPrm"], 16) == 0
    assert int(lines["CapBnd"], 16) == 0
    assert lines["NoNewPrivs"].strip() == "1"
    assert "0" not in lines["Uid"].split()


async def test_limits_visible_inside(api):
    script = ("cat /sys/fs/cgroup/pids/pids.max; cat /sys/fs/cgroup/memory/memory.limit_in_bytes;"
              " ulimit -n; df -k /tmp | tail -1 | awk '{print $2}'")  # fmt: skip
    pids, memory, nofile, tmp_kib = content(await bash(api, script))["stdout"].split()
    defaults = ContainerLimits()
    assert int(pids) == defaults.pids
    assert int(memory) == defaults.memory_bytes
    assert int(nofile) == defaults.open_files
    assert int(tmp_kib) * 1024 == defaults.tmpfs_bytes


async def test_memory_limit_gives_worker_oom(api):
    limits = ContainerLimits(memory_bytes=64 * MiB)
    # `tail` keeps a newline-free line in memory until the cgroup kills it.
    outcome = await bash(api, "head -c 512m /dev/zero | tail >/dev/null", limits)
    assert outcome.error_code == "WORKER_OOM", (outcome.result, outcome.stderr_tail)
    assert labelled_containers(api) == []


async def test_pids_limit_stops_a_fork_bomb(api):
    limits = ContainerLimits(pids=32)
    started = time.monotonic()
    outcome = await bash(api, ":(){ :|:& };:; sleep 2; echo survived", limits, seconds=8)
    assert time.monotonic() - started < 15
    # Either the bomb fizzles against the limit and the script reports, or the host's
    # deadline ends it; both are contained, and nothing is left.
    assert outcome.error_code in (None, "WORKER_TIMEOUT"), outcome.result
    assert labelled_containers(api) == []


async def test_pids_limit_refuses_the_process_past_it(api):
    limits = ContainerLimits(pids=24)
    script = "for i in $(seq 1 40); do sleep 5 & done 2>&1 | grep -c 'Resource temporarily' ; true"
    result = content(await bash(api, script, limits, seconds=20))
    assert result["stderr"] + result["stdout"]  # the shell reported the refused forks


async def test_sleep_past_deadline_is_timeout_and_removed(api):
    started = time.monotonic()
    outcome = await bash(api, "sleep 600", seconds=2)
    assert outcome.error_code == "WORKER_TIMEOUT"
    assert time.monotonic() - started < 6
    assert labelled_containers(api) == []


async def test_runner_environment_does_not_leak(api, monkeypatch):
    monkeypatch.setenv("AGENTS_RUNNER_CANARY", "canary-7f3a")
    script = "env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'; ls /var/run/docker.sock 2>&1"
    result = content(await bash(api, script))
    assert "canary-7f3a" not in result["stdout"] + result["stderr"]
    assert "No such file" in result["stdout"] + result["stderr"]


async def test_tmp_is_fresh_for_every_call(api):
    content(await bash(api, "echo secret > /tmp/left-behind"))
    result = content(await bash(api, "ls -A /tmp"))
    assert "left-behind" not in result["stdout"]
