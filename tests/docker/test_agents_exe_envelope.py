"""The agents-exe example worker's image through DockerRunner(envelope="agents-exe"): its
answers, a misbehaving worker in the same envelope, and a timeout, each a typed outcome,
with every container removed; then a session whose spec names the image."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import docker
import pytest
from testcontainers.core.image import DockerImage

from runner.isolation import DockerRunner, PoolSettings, WarmPool
from runner.session import parse_agent, with_durable_workflows
from runner.stores import SQLiteStore
from tests.conftest import WORKERS, make_request
from tests.docker.conftest import labelled_containers, wait_until

pytestmark = pytest.mark.anyio

EXAMPLE_IMAGE = "agents-runner/example-agents-exe:latest"
HANG_S = 90


@pytest.fixture(scope="module")
def example_image(api: docker.APIClient) -> str:
    try:
        api.inspect_image(EXAMPLE_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {EXAMPLE_IMAGE} is missing; run scripts/build-images")
    return EXAMPLE_IMAGE


@pytest.fixture(scope="module")
def modes_image(example_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """tests/workers/agents_exe_modes.sh on top of the example image (bash and jq)."""
    context: Path = tmp_path_factory.mktemp("agents-exe-modes-image")
    shutil.copy(WORKERS / "agents_exe_modes.sh", context / "modes.sh")
    (context / "Dockerfile").write_text(
        f"FROM {example_image}\n"
        "COPY modes.sh /opt/modes.sh\n"
        'ENTRYPOINT ["/bin/bash", "/opt/modes.sh"]\n'
    )
    with DockerImage(path=str(context), tag="agents-runner-test/agents-exe-modes:latest",
                     clean_up=True) as image:  # fmt: skip
        yield str(image)


def request(tool: str = "echo", arguments: dict | None = None, seconds: float = 60.0):
    return make_request(tool, arguments, seconds=seconds, request_id=str(uuid.uuid4()))


async def test_the_example_image_answers_in_its_envelope(api, example_image) -> None:
    runner = DockerRunner(example_image, api=api, envelope="agents-exe")
    with anyio.fail_after(HANG_S):
        echoed = await runner.call(request("echo", {"text": "from the container"}))
        failed = await runner.call(request("nope", {}))
    assert echoed.ok, echoed.result.error
    assert echoed.result.output.to_wire() == {"type": "text", "content": "from the container"}
    assert echoed.runner_info["envelope"] == "agents-exe"
    assert failed.error_code == "TOOL_FAILED" and failed.exit_code == 0
    assert labelled_containers(api) == []


@pytest.mark.parametrize(("mode", "code"), [("no_token", "MALFORMED_OUTPUT"),
                                            ("wrong_token", "MALFORMED_OUTPUT"),
                                            ("garbage", "MALFORMED_OUTPUT")])  # fmt: skip
async def test_a_misbehaving_worker_is_malformed_output(api, modes_image, mode, code) -> None:
    runner = DockerRunner(modes_image, api=api, command=[mode], envelope="agents-exe")
    with anyio.fail_after(HANG_S):
        outcome = await runner.call(request())
    assert outcome.error_code == code, outcome.result.error
    assert labelled_containers(api) == []


async def test_a_worker_that_hangs_is_killed_at_the_deadline(api, modes_image) -> None:
    runner = DockerRunner(modes_image, api=api, command=["hang"], envelope="agents-exe")
    with anyio.fail_after(HANG_S):
        outcome = await runner.call(request(seconds=2))
    assert outcome.error_code == "WORKER_TIMEOUT"
    assert labelled_containers(api) == []


async def test_a_warm_pool_serves_each_runner_in_its_own_envelope(api, example_image) -> None:
    async with WarmPool(PoolSettings(size=1)) as pool:
        agents_exe = pool.pooled(DockerRunner(example_image, api=api, envelope="agents-exe"))
        v1 = pool.pooled(DockerRunner(example_image, api=api))
        assert await pool.filled(60)
        with anyio.fail_after(HANG_S):
            warm = await agents_exe.call(request("echo", {"text": "warm"}))
            v1_outcome = await v1.call(request("echo", {"text": "warm"}))
        assert warm.ok and warm.runner_info["pooled"] is True
        assert warm.result.output.to_wire() == {"type": "text", "content": "warm"}
        # The same worker sent a v1 request finds no token: the v1 dialect's reading.
        assert v1_outcome.error_code == "WORKER_CRASHED"
    await wait_until(lambda: labelled_containers(api) == [])


def test_a_session_runs_a_tool_in_the_example_image(api, example_image, tmp_path) -> None:
    spec = {"tag": "docker", "image": example_image, "envelope": "agents-exe"}
    document = {
        "slug": "agents-exe-docker",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": "call_1", "name": "add", "arguments": {"a": 1, "b": 2}}]},
            {"text": "the container said {{result:call_1}}"}]},
        "tools": [{"name": "add", "kind": "external"}],
        "toolCallPolicyConfig": {"default": {"tag": "runIsolated", "spec": spec}},
    }  # fmt: skip
    store = SQLiteStore(tmp_path / "s.db")
    try:
        report = anyio.run(with_durable_workflows(parse_agent(document), store).run, "add")
    finally:
        store.close()
    assert report.status == "completed"
    assert report.session.final_answer == 'the container said {"sum": 3}'
    assert labelled_containers(api) == []
