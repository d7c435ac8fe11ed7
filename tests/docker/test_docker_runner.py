"""DockerRunner against the real engine: the core malformed-output cases, deadlines,
start failures, cancellation, and removal of every container it makes."""

from __future__ import annotations

import time

import anyio
import pytest

from runner.isolation import ContainerLimits, DockerRunner, RunnerClosed
from tests.conftest import make_request
from tests.docker.conftest import BASH_IMAGE, labelled_containers

pytestmark = pytest.mark.anyio

#: Only catches a hang: every call here ends long before, by its deadline or on its own.
HANG_S = 60

CORE_BATTERY = [
    ("ok", None),
    ("tool_error", "TOOL_FAILED"),
    ("stdout_flood", "OUTPUT_TOO_LARGE"),
    ("stderr_flood", "OUTPUT_TOO_LARGE"),
    ("empty_exit0", "MALFORMED_OUTPUT"),
    ("two_documents", "MALFORMED_OUTPUT"),
    ("trailing_garbage", "MALFORMED_OUTPUT"),
    ("nan", "MALFORMED_OUTPUT"),
    ("wrong_id", "MALFORMED_OUTPUT"),
    ("wrong_version", "MALFORMED_OUTPUT"),
    ("error_exit0", "MALFORMED_OUTPUT"),
    ("runner_code", "MALFORMED_OUTPUT"),
    ("exit3", "WORKER_CRASHED"),
    ("segfault", "WORKER_CRASHED"),
    ("grandchild_holds_pipes", None),
]


@pytest.mark.parametrize(("mode", "code"), CORE_BATTERY)
async def test_core_battery(api, misbehave_image, mode, code):
    runner = DockerRunner(misbehave_image, command=[mode], api=api)
    with anyio.fail_after(HANG_S):
        outcome = await runner.call(make_request(seconds=30))
    assert outcome.error_code == code, (outcome.result, outcome.stderr_tail)
    assert outcome.runner_info["container"] not in _ids(api)


async def test_deadline_kills_and_removes_the_container(api, misbehave_image):
    runner = DockerRunner(misbehave_image, command=["never_exits"], api=api)
    request = make_request(seconds=2)
    with anyio.fail_after(HANG_S):
        outcome = await runner.call(request)
    assert time.time() * 1000 >= request.deadline_ms, "the worker was not stopped early"
    assert outcome.error_code == "WORKER_TIMEOUT"
    assert outcome.signal == 9, "the host killed the container"
    assert labelled_containers(api) == []


async def test_aclose_closes_the_client_the_runner_made_and_refuses_new_calls():
    async with DockerRunner(BASH_IMAGE) as runner:
        assert (await runner.call(make_request(arguments={"script": "echo hi"}))).ok
        adapter = runner.api().get_adapter("http+docker://")
        assert len(adapter.pools) > 0, "the call went through the runner's own client"
    assert runner.closed
    assert len(adapter.pools) == 0, "its client was closed: no connection pool is left"
    await runner.aclose()  # idempotent
    with pytest.raises(RunnerClosed, match="closed"):
        await runner.call(make_request())
    with pytest.raises(RunnerClosed):
        runner.api()


async def test_aclose_leaves_a_client_it_was_given_open(api):
    runner = DockerRunner(BASH_IMAGE, api=api)
    await runner.aclose()
    await runner.aclose()
    assert api.ping(), "the caller's client still answers"


async def test_missing_image_is_start_failure(api):
    outcome = await DockerRunner("agents-runner-test/no-such-image:0", api=api).call(make_request())
    assert outcome.error_code == "WORKER_START_FAILED"
    assert "scripts/build-images" in outcome.result.error.message


async def test_cancelling_the_caller_removes_the_container(api, misbehave_image):
    runner = DockerRunner(misbehave_image, command=["never_exits"], api=api)
    with anyio.move_on_after(3) as scope:
        await runner.call(make_request(seconds=60))
    assert scope.cancelled_caught
    assert labelled_containers(api) == []


async def test_concurrent_calls_each_get_their_own_container(api):
    runner = DockerRunner(BASH_IMAGE, api=api)
    results = []

    async def one(n: int) -> None:
        request = make_request(arguments={"script": f"echo {n} > /tmp/mine; cat /tmp/*"},
                               request_id=f"call-{n}")  # fmt: skip
        results.append((n, await runner.call(request)))

    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(one, n)
    for n, outcome in results:
        assert outcome.ok, outcome.result
        assert outcome.result.output.content["stdout"] == f"{n}\n"
    assert labelled_containers(api) == []


async def test_describe_through_docker(api):
    described = await DockerRunner(BASH_IMAGE, api=api).describe()
    assert described.describe is not None, described.message
    assert [t.name for t in described.describe.tools] == ["bash"]
    assert described.describe.supported_versions == ["1.0", "1.1"]


async def test_a_raised_memory_limit_is_applied_with_equal_swap(api):
    runner = DockerRunner(BASH_IMAGE, ContainerLimits(memory_bytes=300 * 1024 * 1024), api=api)
    script = "cd /sys/fs/cgroup/memory && cat memory.limit_in_bytes memory.memsw.limit_in_bytes"
    outcome = await runner.call(make_request(arguments={"script": script}))
    assert outcome.ok, outcome.result
    assert outcome.result.output.content["stdout"].split() == [str(300 * 1024 * 1024)] * 2


def _ids(api) -> set[str]:
    return {c["Id"][:12] for c in labelled_containers(api)}
