"""WarmPool against the real engine: one call per container, nothing left behind (on exit,
on cancellation, after a crash via the sweeper), deadlines from the call's start, cold
start when the shelf is empty, idle containers recycled, and the pool's lifecycle (new,
open, closing, closed; use outside "open" refused). No speed assertions here:
scripts/bench measures speed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import anyio
import docker
import pytest

from runner.isolation import (
    ContainerLimits,
    DockerRunner,
    PoolSettings,
    PoolState,
    PoolStateError,
    RunnerClosed,
    WarmPool,
    sweep,
)
from runner.isolation.containers import (
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_ROLE,
    my_owner_token,
    owner_token,
)
from tests.conftest import REPO, make_request
from tests.docker.conftest import BASH_IMAGE, labelled_containers, wait_until

pytestmark = pytest.mark.anyio


def bash(script: str, seconds: float = 30, n: int = 1):
    return make_request(arguments={"script": script}, seconds=seconds, request_id=f"call-{n}")


def ids(api: docker.APIClient, owner: str | None = None, role: str | None = None) -> set[str]:
    if owner is None:
        found = labelled_containers(api)
    else:
        labels = [f"{LABEL_MANAGED}=1", f"{LABEL_OWNER}={owner}"]
        found = api.containers(all=True, filters={"label": labels})
    return {c["Id"][:12] for c in found if role is None or c["Labels"][LABEL_ROLE] == role}


async def test_a_pooled_container_serves_one_call_and_the_pool_leaves_nothing(api):
    used = []
    async with WarmPool(PoolSettings(size=2, refill_concurrency=2)) as pool:
        runner = pool.pooled(DockerRunner(BASH_IMAGE, api=api))
        assert await pool.filled(60)
        for n in range(5):
            # Each call leaves a mark in /tmp and must not see any other call's.
            # (The script's own workspace is the one entry it finds: /tmp/agents-runner-ws-*.)
            outcome = await runner.call(bash(f"ls /tmp; touch /tmp/mark-{n}", n=n))
            assert outcome.ok, outcome.result
            seen = outcome.result.output.content["stdout"].split()
            assert len(seen) == 1 and seen[0].startswith("agents-runner-ws-"), (
                f"a container served twice: /tmp holds {seen}"
            )
            used.append(outcome.runner_info["container"])
            if n < 2:  # the first two come from the filled shelf
                assert outcome.runner_info["pooled"] is True
        assert len(set(used)) == 5
        # Used containers are removed in the background.
        await wait_until(lambda: not set(used) & ids(api))
        assert ids(api, role="pool"), "the shelf is refilled"
    assert labelled_containers(api) == []


async def test_exit_while_containers_are_starting_leaves_nothing(api):
    async with WarmPool(PoolSettings(size=3, refill_concurrency=3)) as pool:
        pool.pooled(DockerRunner(BASH_IMAGE, api=api))
        # The engine holds a container of the pool whose start has not finished.
        await wait_until(lambda: pool.starting() > 0 and bool(ids(api, role="pool")), 60, 0.01)
    assert pool.state is PoolState.CLOSED
    assert labelled_containers(api) == []


async def test_the_deadline_starts_with_the_call_not_the_container(api):
    async with WarmPool(PoolSettings(size=1)) as pool:
        runner = pool.pooled(DockerRunner(BASH_IMAGE, api=api))
        assert await pool.filled(60)
        await anyio.sleep(4)  # the container idles longer than the call's whole deadline
        outcome = await runner.call(bash("sleep 1; echo done", seconds=3))
        assert outcome.ok, outcome.result
        assert outcome.runner_info["pooled"] is True
        assert await pool.filled(60)
        outcome = await runner.call(bash("sleep 60", seconds=2))
        assert outcome.error_code == "WORKER_TIMEOUT"
        assert outcome.runner_info["pooled"] is True
    assert labelled_containers(api) == []


async def test_an_empty_pool_starts_cold(api):
    async with WarmPool(PoolSettings(size=0)) as pool:
        outcome = await pool.pooled(DockerRunner(BASH_IMAGE, api=api)).call(bash("echo cold"))
        assert outcome.ok, outcome.result
        assert outcome.runner_info["pooled"] is False
    assert labelled_containers(api) == []


async def test_cancelling_a_pooled_call_removes_its_container(api):
    async with WarmPool(PoolSettings(size=1)) as pool:
        runner = pool.pooled(DockerRunner(BASH_IMAGE, api=api))
        assert await pool.filled(60)
        (warm,) = ids(api, role="pool")
        with anyio.move_on_after(3) as scope:
            await runner.call(bash("sleep 60", seconds=60))
        assert scope.cancelled_caught
        await wait_until(lambda: warm not in ids(api))
    assert labelled_containers(api) == []


async def test_a_call_finding_the_shelf_empty_waits_for_the_start_under_way(api):
    async with WarmPool(PoolSettings(size=1)) as pool:
        runner = pool.pooled(DockerRunner(BASH_IMAGE, api=api))
        assert await pool.filled(60)
        outcomes = []

        async def one(n: int) -> None:
            outcomes.append(await runner.call(bash("echo $((40 + 2))", n=n)))

        async with anyio.create_task_group() as group:
            group.start_soon(one, 1)
            group.start_soon(one, 2)  # the shelf is empty; the refill is for this call
        assert [o.runner_info["pooled"] for o in outcomes] == [True, True]
        assert len({o.runner_info["container"] for o in outcomes}) == 2
        with anyio.move_on_after(0.05):  # cancelled while waiting for a container
            await runner.call(bash("sleep 60"))
    assert labelled_containers(api) == []


async def test_idle_containers_past_their_age_are_replaced(api):
    async with WarmPool(PoolSettings(size=1, max_idle_s=1.0)) as pool:
        pool.pooled(DockerRunner(BASH_IMAGE, api=api))
        assert await pool.filled(60)
        first = ids(api, role="pool")
        await wait_until(lambda: not ids(api, role="pool") & first and pool.idle() == 1)
    assert labelled_containers(api) == []


def pool_starts(api: docker.APIClient, since: float) -> set[str]:
    """The pool containers this process had the engine create since `since` (its events:
    a container made and removed between two looks is counted too)."""
    labels = [f"{LABEL_OWNER}={my_owner_token()}", f"{LABEL_ROLE}=pool"]
    found = {"type": "container", "event": "create", "label": labels}
    events = api.events(since=since, until=time.time(), decode=True, filters=found)
    return {e["id"][:12] for e in events}


async def test_an_unused_shelf_shrinks_to_its_minimum_and_grows_back_at_its_next_call(api):
    settings = PoolSettings(size=3, idle_timeout_s=1.0, min_idle=1)
    since = time.time()
    async with WarmPool(settings) as pool:
        runner = pool.pooled(DockerRunner(BASH_IMAGE, api=api))
        await wait_until(lambda: len(pool_starts(api, since)) == 3, 60)
        # Unused for idle_timeout_s: the shelf gives back all but min_idle, in the engine.
        await wait_until(lambda: len(ids(api, role="pool")) == 1 and pool.idle() == 1, 60)
        kept = ids(api, role="pool")
        since = time.time()
        outcome = await runner.call(bash("echo warm"))
        assert outcome.ok and outcome.runner_info["pooled"] is True
        assert outcome.runner_info["container"][:12] in kept, "the kept container served it"
        # In use again: refilled to its size (3 new containers, not min_idle's 1), which
        # it may give back again once unused for a second.
        await wait_until(lambda: len(pool_starts(api, since)) >= 3, 60)
    assert labelled_containers(api) == []


async def test_an_unused_shelf_with_no_minimum_empties_and_its_next_call_waits_warm(api):
    async with WarmPool(PoolSettings(size=2, idle_timeout_s=0.5)) as pool:
        runner = pool.pooled(DockerRunner(BASH_IMAGE, api=api))
        assert await pool.filled(60)
        await wait_until(lambda: not ids(api, role="pool") and pool.idle() == 0, 60)
        # The next call refills the shelf and takes the first container it starts.
        outcome = await runner.call(bash("echo back"))
        assert outcome.ok and outcome.runner_info["pooled"] is True
    assert labelled_containers(api) == []


async def test_each_shelf_keeps_its_own_size_and_a_larger_request_grows_it(api):
    async with WarmPool(PoolSettings(size=1)) as pool:
        pool.pooled(DockerRunner(BASH_IMAGE, api=api), size=2)
        assert await pool.filled(60) and pool.idle() == 2
        cold = pool.pooled(DockerRunner(BASH_IMAGE, ContainerLimits(pids=32), api=api), size=0)
        outcome = await cold.call(bash("echo cold"))
        assert outcome.ok and outcome.runner_info["pooled"] is False, "size 0 starts cold"
        pool.pooled(DockerRunner(BASH_IMAGE, api=api), size=1)  # smaller: the shelf keeps 2
        pool.pooled(DockerRunner(BASH_IMAGE, api=api), size=3)
        assert await pool.filled(60) and pool.idle() == 3
        with pytest.raises(ValueError, match="0 or more"):
            pool.pooled(DockerRunner(BASH_IMAGE, api=api), size=-1)
    assert labelled_containers(api) == []


def test_pool_settings_refuse_a_timeout_or_minimum_out_of_range():
    with pytest.raises(ValueError, match="idle_timeout_s must be positive"):
        PoolSettings(idle_timeout_s=0)
    with pytest.raises(ValueError, match="min_idle must be 0 or more"):
        PoolSettings(min_idle=-1)


async def test_a_missing_image_is_a_start_failure_not_a_crash(api):
    async with WarmPool(PoolSettings(size=2)) as pool:
        runner = pool.pooled(DockerRunner("agents-runner-test/no-such-image:0", api=api))
        outcome = await runner.call(bash("true"))
        assert outcome.error_code == "WORKER_START_FAILED"


async def test_a_pool_goes_from_new_to_open_to_closed_and_refuses_use_outside_open(api):
    pool = WarmPool(PoolSettings(size=1))
    assert pool.state is PoolState.NEW
    with pytest.raises(PoolStateError, match="is new"):
        pool.pooled(DockerRunner(BASH_IMAGE, api=api))
    async with pool:
        assert pool.state is PoolState.OPEN
        runner = pool.pooled(DockerRunner(BASH_IMAGE, api=api))
        assert await pool.filled(60)
        assert (await runner.call(bash("echo warm"))).ok
    assert pool.state is PoolState.CLOSED
    assert labelled_containers(api) == [], "nothing of the pool is left in the engine"
    with pytest.raises(PoolStateError, match="is closed") as refused:
        await runner.call(bash("echo too late"))
    assert refused.value.state is PoolState.CLOSED
    assert isinstance(refused.value, RunnerClosed)
    with pytest.raises(PoolStateError, match="is closed"):
        pool.pooled(DockerRunner(BASH_IMAGE, api=api))
    with pytest.raises(PoolStateError, match="opened once"):
        async with pool:
            pass
    await pool.__aexit__(None, None, None)  # leaving again does nothing
    assert pool.state is PoolState.CLOSED
    assert labelled_containers(api) == []


async def test_an_error_in_the_block_leaves_as_it_is_and_the_pool_still_cleans_up(api):
    with pytest.raises(ValueError, match="the caller's own"):
        async with WarmPool(PoolSettings(size=2)) as pool:
            pool.pooled(DockerRunner(BASH_IMAGE, api=api))
            assert await pool.filled(60)
            raise ValueError("the caller's own error")
    assert pool.state is PoolState.CLOSED
    assert labelled_containers(api) == []


async def test_the_pool_closes_the_runners_it_was_given():
    own = DockerRunner(BASH_IMAGE)  # makes its own client: the pool closes it
    async with WarmPool(PoolSettings(size=1)) as pool:
        runner = pool.pooled(own)
        assert (await runner.call(bash("echo hi"))).ok
        assert not own.closed
    assert own.closed
    with pytest.raises(RunnerClosed):
        await own.call(bash("echo after"))


async def test_closing_a_pooled_runner_closes_only_that_handle(api):
    async with WarmPool(PoolSettings(size=1)) as pool:
        first = pool.pooled(DockerRunner(BASH_IMAGE, api=api))
        second = pool.pooled(DockerRunner(BASH_IMAGE, api=api))
        async with first:
            assert (await first.call(bash("echo one"))).ok
        await first.aclose()  # idempotent
        with pytest.raises(RunnerClosed, match="closed"):
            await first.call(bash("echo two"))
        assert (await second.call(bash("echo three"))).ok, "the pool and its shelf go on"
        assert pool.state is PoolState.OPEN
    assert labelled_containers(api) == []


async def test_leaving_the_pool_waits_for_a_call_under_way(api):
    outcomes = []

    async def call(runner) -> None:
        outcomes.append(await runner.call(bash("sleep 1; echo finished")))

    async with anyio.create_task_group() as callers:
        async with WarmPool(PoolSettings(size=1)) as pool:
            runner = pool.pooled(DockerRunner(BASH_IMAGE, api=api))
            assert await pool.filled(60)
            callers.start_soon(call, runner)
            await wait_until(lambda: pool.calls_under_way == 1)
        assert pool.state is PoolState.CLOSED
        assert pool.calls_under_way == 0, "the exit waited for the call"
    (outcome,) = outcomes
    assert outcome.ok and outcome.result.output.content["stdout"] == "finished\n"
    assert labelled_containers(api) == []


POOL_THEN_WAIT = f"""
import anyio
from runner.isolation import DockerRunner, PoolSettings, WarmPool

async def main():
    async with WarmPool(PoolSettings(size=2)) as pool:
        pool.pooled(DockerRunner({BASH_IMAGE!r}))
        assert await pool.filled(60)
        print("filled", flush=True)
        await anyio.sleep(120)

anyio.run(main)
"""


def test_the_sweeper_removes_the_pool_of_a_killed_process(api):
    process = subprocess.Popen([sys.executable, "-c", POOL_THEN_WAIT], cwd=REPO,
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        owner = owner_token(process.pid)
        assert owner is not None
        assert process.stdout is not None and process.stdout.readline() == "filled\n"
        left = ids(api, owner=owner, role="pool")
        assert len(left) == 2
    finally:
        process.send_signal(signal.SIGKILL)  # no `async with` exit: the pool is orphaned
        process.wait()
    assert ids(api, owner=owner) == left
    report = sweep(api)
    assert left <= set(report.removed)
    assert ids(api, owner=owner) == set()
