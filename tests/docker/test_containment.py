"""Containment through the bash-runner image with the default limits: what a script
sees from inside proves the sandbox. No packet goes to any address off this machine:
the network probes target a server this test runs on the host's loopback.

Every test runs under runc and under gVisor's runsc (the `runtime` fixture). Where gVisor
shows the sandbox differently, the runsc variant is asserted explicitly (docs/threat-model.md,
"Runtime tier"): its kernel is 4.4.0 and its dmesg its own; /sys and cgroupfs are not there,
so the limits show in /proc/meminfo and by their effect; /proc/self/status has no
NoNewPrivs line (prctl says it is set) and Seccomp 0 (the profile is not loaded: gVisor's
kernel answers the worker's syscalls); pids.max counts the sandbox's own host threads,
so reaching it ends the whole sandbox (WORKER_CRASHED), and a limit below
GVISOR_MIN_PIDS is refused before the start (WORKER_START_FAILED)."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest

from runner.isolation import CallOutcome, ContainerLimits, DockerRunner
from runner.isolation.runtimes import GVISOR_MIN_PIDS
from tests.conftest import make_request
from tests.docker.conftest import BASH_IMAGE, labelled_containers

pytestmark = pytest.mark.anyio
MiB = 1024 * 1024


async def bash(api, runtime: str, script: str, limits: ContainerLimits | None = None,
               seconds: float = 30) -> CallOutcome:  # fmt: skip
    """`script` as one bash call under `runtime` (with `limits`, else the defaults)."""
    limits = dataclasses.replace(limits or ContainerLimits(), runtime=runtime)
    runner = DockerRunner(BASH_IMAGE, limits, api=api)
    return await runner.call(make_request(arguments={"script": script}, seconds=seconds,
                                          max_result_bytes=256 * 1024))  # fmt: skip


def content(outcome: CallOutcome) -> dict:
    assert outcome.ok, (outcome.result, outcome.stderr_tail)
    return outcome.result.output.content


PROBE = "exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED || echo REFUSED"
#: The sandbox dies with its pids limit under gVisor (its threads count): a typed end.
GVISOR_PIDS_END = ("WORKER_CRASHED", "WORKER_TIMEOUT")


def pids_for(runtime: str, pids: int) -> int:
    """`pids`, or gVisor's floor under runsc (its own threads count against the limit)."""
    return pids if runtime == "runc" else max(pids, GVISOR_MIN_PIDS)


async def test_the_container_runs_under_the_runtime_asked_for(api, runtime):
    outcome = await bash(api, runtime, "uname -r; echo ---; cat /proc/version; echo ---; dmesg")
    kernel, version, dmesg = content(outcome)["stdout"].split("---\n")
    assert outcome.runner_info["runtime"] == runtime  # what the engine says ran it
    assert outcome.runner_info["limits"]["runtime"] == runtime
    assert outcome.runner_info["image_id"] == api.inspect_image(BASH_IMAGE)["Id"]
    if runtime == "runc":  # the host's own kernel, and its log is closed to the worker
        assert kernel.strip() == os.uname().release
        assert os.uname().release in version and dmesg == ""
        assert outcome.runner_info["limits"]["seccomp"] == "default"
    else:  # gVisor's kernel: its own version, its own boot log; never the host's
        assert kernel.strip() == "4.4.0" != os.uname().release
        assert os.uname().release not in version + dmesg
        assert "gVisor" in dmesg
        assert outcome.runner_info["limits"]["seccomp"] == "gvisor"


async def test_hello_as_non_root(api, runtime):
    result = content(await bash(api, runtime, "echo hi; id -u"))
    out = result["stdout"].split()
    assert out[0] == "hi" and out[1] != "0"
    assert result["exit_code"] == 0


async def test_no_network_only_loopback(api, runtime, loopback_server):
    script = ("tail -n +3 /proc/net/dev | cut -d: -f1; echo ---; tail -n +2 /proc/net/route;"
              " echo ---;"
              " grep -c nameserver /etc/resolv.conf || true; echo ---;"
              " cat /proc/net/if_inet6 2>/dev/null | awk '{print $6}'; echo ---; "
              + PROBE.format(port=loopback_server[0]))  # fmt: skip
    sections = content(await bash(api, runtime, script))["stdout"].split("---\n")
    assert sections[0].split() == ["lo"]
    assert sections[1].strip() == "", "no route at all"
    assert sections[2].strip() in ("0", ""), "no resolver configured"
    assert set(sections[3].split()) <= {"lo"}, "no IPv6 beyond loopback"
    assert "REFUSED" in sections[4]


async def test_probe_detects_a_network_when_one_is_given(api, runtime, loopback_server):
    # Positive control for the probe above: opted into the host's network explicitly,
    # the same script reaches the test's loopback server.
    limits = ContainerLimits(network="host")
    outcome = await bash(api, runtime, PROBE.format(port=loopback_server[0]), limits)
    if runtime == "runsc":  # registered with --network=none: refused, not run without one
        assert outcome.error_code == "WORKER_START_FAILED", outcome.result
        assert "--network=none" in outcome.result.error.message
        assert "network='host' cannot apply" in outcome.result.error.message
        assert loopback_server[1] == []
        return
    assert "CONNECTED" in content(outcome)["stdout"]


async def test_read_only_root_and_writable_tmp(api, runtime):
    # /var/tmp is world-writable in the image: only the read-only mount refuses it.
    script = ("touch /x /etc/x /usr/x /var/tmp/x 2>&1; grep -c ' / [^ ]* ro[, ]' /proc/mounts;"
              " echo data > /tmp/ok && cat /tmp/ok")  # fmt: skip
    result = content(await bash(api, runtime, script))
    assert result["stdout"].count("cannot touch") == 4
    assert "'/var/tmp/x': Read-only file system" in result["stdout"]
    # gVisor checks the owner (root) before the mount, so it says "Permission denied".
    refusal = "Read-only file system" if runtime == "runc" else "Permission denied"
    for path in ("/x", "/etc/x", "/usr/x"):
        assert f"'{path}': {refusal}" in result["stdout"]
    assert result["stdout"].split()[-2:] == ["1", "data"]  # the root mount is ro


async def test_no_capabilities_no_new_privileges(api, runtime):
    no_new_privs = 'import ctypes; print("prctl:", ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'
    script = (f"grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Uid)' /proc/self/status;"
              f" python3 -c '{no_new_privs}'")  # fmt: skip
    lines = dict(
        line.split(":", 1)
        for line in content(await bash(api, runtime, script))["stdout"].splitlines()
    )
    assert int(lines["CapEff"], 16) == 0 and int(lines["CapPrm"], 16) == 0
    assert int(lines["CapBnd"], 16) == 0
    assert lines["prctl"].strip() == "1"  # PR_GET_NO_NEW_PRIVS
    if runtime == "runc":
        assert lines["NoNewPrivs"].strip() == "1"
    else:  # gVisor's /proc/self/status has no such line; prctl above is the proof
        assert "NoNewPrivs" not in lines
    assert "0" not in lines["Uid"].split()


async def test_limits_visible_inside(api, runtime):
    script = ("cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || echo none;"
              " cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || echo none;"
              " awk '/^MemTotal/ {print $2}' /proc/meminfo;"
              " ulimit -n; df -k /tmp | tail -1 | awk '{print $2}'")  # fmt: skip
    pids, memory, mem_total_kib, nofile, tmp_kib = content(await bash(api, runtime, script))[
        "stdout"
    ].split()
    defaults = ContainerLimits()
    if runtime == "runc":
        assert int(pids) == defaults.pids
        assert int(memory) == defaults.memory_bytes
    else:  # no cgroupfs inside gVisor: its kernel sizes its memory to the limit instead
        assert (pids, memory) == ("none", "none")
        assert int(mem_total_kib) * 1024 == defaults.memory_bytes
    assert int(nofile) == defaults.open_files
    assert int(tmp_kib) * 1024 == defaults.tmpfs_bytes


async def test_memory_limit_gives_worker_oom(api, runtime):
    limits = ContainerLimits(memory_bytes=64 * MiB)
    # `tail` keeps a newline-free line in memory until the cgroup kills it.
    outcome = await bash(api, runtime, "head -c 512m /dev/zero | tail >/dev/null", limits)
    assert outcome.error_code == "WORKER_OOM", (outcome.result, outcome.stderr_tail)
    assert labelled_containers(api) == []


async def test_pids_limit_stops_a_fork_bomb(api, runtime):
    limits = ContainerLimits(pids=pids_for(runtime, 32))
    started = time.monotonic()
    outcome = await bash(api, runtime, ":(){ :|:& };:; sleep 2; echo survived", limits, seconds=8)
    assert time.monotonic() - started < 15
    # Either the bomb fizzles against the limit and the script reports, or the host's
    # deadline ends it; both are contained, and nothing is left. Under gVisor the limit
    # ends the sandbox itself.
    expected = (None, "WORKER_TIMEOUT") if runtime == "runc" else GVISOR_PIDS_END
    assert outcome.error_code in expected, outcome.result
    assert labelled_containers(api) == []


async def test_pids_limit_refuses_the_process_past_it(api, runtime):
    limits = ContainerLimits(pids=24)
    script = "for i in $(seq 1 40); do sleep 5 & done 2>&1 | grep -c 'Resource temporarily' ; true"
    outcome = await bash(api, runtime, script, limits, seconds=20)
    if runtime == "runsc":  # gVisor's own threads would take the pids: refused up front
        assert outcome.error_code == "WORKER_START_FAILED", outcome.result
        assert f"at least {GVISOR_MIN_PIDS}" in outcome.result.error.message
        assert "container" not in outcome.runner_info  # refused before any create
        return
    result = content(outcome)
    assert result["stderr"] + result["stdout"]  # the shell reported the refused forks


async def test_sleep_past_deadline_is_timeout_and_removed(api, runtime):
    started = time.monotonic()
    outcome = await bash(api, runtime, "sleep 600", seconds=2)
    assert outcome.error_code == "WORKER_TIMEOUT"
    assert time.monotonic() - started < 6
    assert labelled_containers(api) == []


async def test_runner_environment_does_not_leak(api, runtime, monkeypatch):
    monkeypatch.setenv("AGENTS_RUNNER_CANARY", "canary-7f3a")
    script = "env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'; ls /var/run/docker.sock 2>&1"
    result = content(await bash(api, runtime, script))
    assert "canary-7f3a" not in result["stdout"] + result["stderr"]
    assert "cannot access '/var/run/docker.sock'" in result["stdout"] + result["stderr"]


async def test_tmp_is_fresh_for_every_call(api, runtime):
    content(await bash(api, runtime, "echo secret > /tmp/left-behind"))
    result = content(await bash(api, runtime, "ls -A /tmp"))
    assert "left-behind" not in result["stdout"]
