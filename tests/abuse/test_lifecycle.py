"""Lifecycle: many hostile calls at once, and a runner killed in the middle of a call
whose container `agents-runner sweep` then removes."""

from __future__ import annotations

import subprocess
import sys
import time

import anyio
import pytest

from runner.isolation import CallOutcome, DockerRunner
from runner.isolation.containers import LABEL_MANAGED, LABEL_OWNER, owner_token
from tests.abuse.conftest import PEAK, RSS_BOUND_BYTES, bash_request, run_call, under_runtime
from tests.conftest import REPO
from tests.docker.conftest import BASH_IMAGE

pytestmark = pytest.mark.anyio

#: (script, deadline seconds, the outcomes it may have: None is an ok result)
HOSTILE = [
    (":(){ :|:& };:; sleep 1", 15, {None, "WORKER_TIMEOUT"}),
    ("yes", 15, {"WORKER_TIMEOUT"}),
    ("head -c 2G /dev/zero | tail", 60, {"WORKER_OOM"}),
    ("yes > /proc/1/fd/1", 60, {"OUTPUT_TOO_LARGE"}),
    ("cat /dev/urandom > /proc/1/fd/2", 60, {"OUTPUT_TOO_LARGE"}),
    ("while :; do :; done", 15, {"WORKER_TIMEOUT"}),
    ("kill -STOP -1", 15, {"WORKER_TIMEOUT"}),
    ("sleep 1000 & setsid sleep 1000 & echo done", 60, {None}),
]


#: What gVisor adds: its sandbox may end itself at the pids or memory limit (status 2).
GVISOR_ALSO = {":(){ :|:& };:; sleep 1": {"WORKER_CRASHED"},
               "head -c 2G /dev/zero | tail": {"WORKER_CRASHED"}}  # fmt: skip


async def test_32_hostile_calls_at_once(api, case_runtime):
    # Its own client (a connection pool for 32 calls), under the case's runtime.
    runner = DockerRunner(BASH_IMAGE, under_runtime())
    calls = [(bash_request(script, seconds=seconds), codes)
             for script, seconds, codes in HOSTILE for _ in range(4)]  # fmt: skip
    outcomes: dict[str, CallOutcome] = {}

    async def one(request) -> None:
        outcomes[request.id] = await run_call(api, request, runner=runner)

    before = PEAK.reset()
    with anyio.fail_after(3 * 60):
        async with anyio.create_task_group() as tasks:
            for request, _ in calls:
                tasks.start_soon(one, request)
    growth = PEAK.peak() - before
    assert growth < RSS_BOUND_BYTES, f"the runner grew by {growth >> 20} MiB"
    for request, codes in calls:
        if case_runtime == "runsc":
            codes = codes | GVISOR_ALSO.get(request.arguments["script"], set())
        outcome = outcomes[request.id]
        assert outcome.error_code in codes, (request.arguments, outcome.result)


def test_a_runner_killed_mid_call_leaves_a_container_that_sweep_removes(api, case_runtime):
    code = ("import anyio\nfrom runner.isolation import ContainerLimits, DockerRunner\n"
            "from tests.abuse.conftest import bash_request\n"
            f"runner = DockerRunner({BASH_IMAGE!r}, ContainerLimits(runtime={case_runtime!r}))\n"
            "anyio.run(runner.call, bash_request('sleep 600', seconds=600))")  # fmt: skip
    runner = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    token = owner_token(runner.pid)
    labels = [f"{LABEL_MANAGED}=1", f"{LABEL_OWNER}={token}"]
    try:
        deadline = time.monotonic() + 60
        while not api.containers(filters={"label": labels, "status": "running"}):
            assert runner.poll() is None, "the runner ended before its call started"
            assert time.monotonic() < deadline, "the runner's container never started"
            time.sleep(0.1)
    finally:
        runner.kill()  # SIGKILL: no cleanup code of the runner runs
        runner.wait()
    assert len(api.containers(all=True, filters={"label": labels})) == 1  # orphaned
    swept = subprocess.run([sys.executable, "-m", "runner.cli", "sweep"], cwd=REPO,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert swept.returncode == 0, swept.stderr
    assert "removed" in swept.stdout
    assert api.containers(all=True, filters={"label": labels}) == []
