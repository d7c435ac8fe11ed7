"""Resources: bombs, spins and stops. Each ends at a limit (pids, memory, tmpfs) with the
failure visible in the result, or at the host's deadline as WORKER_TIMEOUT."""

from __future__ import annotations

import pytest

from runner.isolation import ContainerLimits
from runner.isolation.runtimes import GVISOR_MIN_PIDS
from tests.abuse.conftest import attack

pytestmark = pytest.mark.anyio


async def test_fork_bomb_stops_at_the_pids_limit(api, case_runtime):
    hit = await attack(api, ":(){ :|:& };: 2>/dev/null; sleep 1; echo survived", seconds=8)
    # The bomb either fizzles against pids.max (the script finishes and reports) or it
    # keeps the pids table full until the host's deadline; both are contained. Under
    # gVisor the limit counts the sandbox's own threads: reaching it ends the sandbox.
    ends = (
        (None, "WORKER_TIMEOUT") if case_runtime == "runc" else ("WORKER_CRASHED", "WORKER_TIMEOUT")
    )
    assert hit.outcome.error_code in ends, hit.outcome.result
    if hit.outcome.ok:
        assert "survived" in hit.content["stdout"]


async def test_spawning_exactly_the_pids_limit_is_refused_past_it(api, case_runtime):
    limits = ContainerLimits(pids=32)
    # Python, not bash: bash retries a refused fork for seconds before giving up.
    spawn = """
import errno, os, time
started = refused = 0
for _ in range(32):
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        started += 1
    except OSError as exc:
        refused += exc.errno == errno.EAGAIN
print(started, refused)
"""
    hit = await attack(api, f"python3 -c '{spawn}'", limits=limits)
    if case_runtime == "runsc":  # gVisor's threads count too: refused before the start
        assert hit.outcome.error_code == "WORKER_START_FAILED", hit.outcome.result
        assert f"at least {GVISOR_MIN_PIDS}" in hit.outcome.result.error.message
        return
    started, refused = map(int, hit.content["stdout"].split())
    # init, the worker, bash and python hold pids too: fewer than 32 children can start.
    assert started + refused == 32
    assert 0 < started < 32 and refused > 0


async def test_memory_bomb_past_the_limit_is_worker_oom(api):
    # `tail` keeps a line without newline in memory until the cgroup kills it. The pipe
    # is slow under gVisor (about 10 s to reach the limit on an idle machine, more under
    # load): the deadline is set well past that, so the bomb and not the clock ends it.
    hit = await attack(api, "head -c 2G /dev/zero | tail > /dev/null; echo after", seconds=90)
    assert hit.outcome.error_code == "WORKER_OOM", hit.outcome.result


async def test_many_small_processes_together_past_the_limit_are_worker_oom(api, case_runtime):
    grab = "python3 -c 'import time; b = b\"x\" * (96 << 20); time.sleep(2)'"
    hit = await attack(api, f"for i in $(seq 8); do {grab} & done; wait", seconds=10)
    # gVisor's kernel may be the one that runs out, ending the sandbox (exit status 2).
    ends = ("WORKER_OOM",) if case_runtime == "runc" else ("WORKER_OOM", "WORKER_CRASHED")
    assert hit.outcome.error_code in ends, hit.outcome.result


async def test_dev_shm_fill_stops_at_its_size(api):
    script = "head -c 64m /dev/zero > /dev/shm/fill; echo rc=$?; wc -c < /dev/shm/fill"
    hit = await attack(api, script)
    assert "No space left on device" in hit.content["stderr"]
    assert int(hit.content["stdout"].split()[-1]) <= ContainerLimits().shm_bytes


async def test_cpu_spin_is_ended_by_the_deadline(api):
    hit = await attack(api, "while :; do :; done", seconds=3)
    assert hit.outcome.error_code == "WORKER_TIMEOUT"
    assert hit.outcome.duration_ms < 3 * 3000


async def test_sleep_past_the_deadline_is_worker_timeout(api):
    hit = await attack(api, "sleep 600", seconds=3)
    assert hit.outcome.error_code == "WORKER_TIMEOUT"
    assert hit.outcome.duration_ms < 3 * 3000


async def test_stopping_its_own_process_group_does_not_dodge_the_deadline(api):
    hit = await attack(api, "kill -STOP 0; echo resumed", seconds=3)
    assert hit.outcome.error_code == "WORKER_TIMEOUT"


async def test_stopping_every_process_it_may_signal_does_not_dodge_the_deadline(api):
    # kill -1: every process of this uid in the container, the worker and init included.
    hit = await attack(api, "kill -STOP -1; echo resumed", seconds=3)
    assert hit.outcome.error_code == "WORKER_TIMEOUT"


async def test_ignoring_sigterm_does_not_outlive_the_deadline(api):
    script = "trap '' TERM INT HUP; setsid bash -c \"trap '' TERM; sleep 600\" & sleep 600"
    hit = await attack(api, script, seconds=3)
    assert hit.outcome.error_code == "WORKER_TIMEOUT"
    assert hit.outcome.duration_ms < 3 * 3000
