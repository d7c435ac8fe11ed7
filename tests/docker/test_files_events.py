"""Envelope 1.1 through DockerRunner and the warm pool: live events (each line within
200 ms of being written), the output tail of a killed call (timeout, OOM, crash), the
file-safety battery (traversal refused before any container starts, hostile media paths
refused), capabilities learned once per image, and the 1.0 example images unchanged.

The worker is tests/workers/events_worker.py on top of the python-runner image, so these
tests do not depend on the runner images' own streaming; the bash-runner cases at the
end need images whose worker declares `events` (scripts/build-images)."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import docker
import pytest
from testcontainers.core.image import DockerImage

from envelopes.v1 import ToolCallRequest
from runner.isolation import (
    CapabilityCache,
    ContainerLimits,
    DockerRunner,
    PoolSettings,
    WarmPool,
    WorkerEvent,
)
from runner.isolation.base import ExchangeRunner
from runner.isolation.containers import LABEL_CALL
from tests.conftest import WORKERS, make_request
from tests.docker.conftest import BASH_IMAGE, PYTHON_IMAGE, labelled_containers
from tests.runner.isolation.test_events import LINES_SCRIPT, assert_each_line_in_time
from tests.runner.isolation.test_files import (
    HOSTILE_MEDIA,
    TRAVERSALS,
    names_part,
    raw_file,
    unchecked_request,
)

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024
HANG_S = 120


@pytest.fixture(scope="session")
def events_image(api: docker.APIClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    context: Path = tmp_path_factory.mktemp("events-image")
    shutil.copy(WORKERS / "events_worker.py", context / "events_worker.py")
    (context / "Dockerfile").write_text(
        f"FROM {PYTHON_IMAGE}\n"
        "COPY events_worker.py /opt/events_worker.py\n"
        'ENTRYPOINT ["python3", "/opt/events_worker.py"]\n'
        'CMD ["ok"]\n'
    )
    with DockerImage(path=str(context), tag="agents-runner-test/events:latest",
                     clean_up=True) as image:  # fmt: skip
        yield str(image)


@pytest.fixture(params=["docker", "pool"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def served(kind: str, runner: DockerRunner) -> AsyncIterator[ExchangeRunner]:
    """`runner` itself, or served from a warm pool of one container."""
    if kind == "docker":
        async with runner:
            yield runner
        return
    async with WarmPool(PoolSettings(size=1)) as pool:
        pooled = pool.pooled(runner)
        assert await pool.filled(60)
        assert isinstance(pooled, ExchangeRunner)
        yield pooled


def events_runner(
    api, image: str, *command: str, capability_cache: CapabilityCache | None = None, **limits
) -> DockerRunner:
    return DockerRunner(image, ContainerLimits(**limits), command=list(command), api=api,
                        capability_cache=capability_cache)  # fmt: skip


async def test_each_line_reaches_the_callback_within_200ms(api, events_image, kind):
    """The issue's latency test through Docker and the pool: a line every 0.5 s."""
    received: list[WorkerEvent] = []
    async with served(kind, events_runner(api, events_image, "lines", "6", "0.5")) as runner:
        with anyio.fail_after(HANG_S):
            outcome = await runner.call(make_request("run"), received.append)
    assert outcome.ok, outcome.result
    assert_each_line_in_time(received, 6)
    assert outcome.stderr_tail == "".join(f"plain stderr {i}\n" for i in range(6))


async def test_a_timed_out_call_carries_the_lines_before_the_kill(api, events_image, kind):
    async with served(kind, events_runner(api, events_image, "hang", "3")) as runner:
        with anyio.fail_after(HANG_S):
            outcome = await runner.call(make_request("run", seconds=3), lambda e: None)
    error = outcome.result.error
    assert error is not None and error.code == "WORKER_TIMEOUT"
    assert error.output_tail is not None
    assert [t.split()[:2] for t in error.output_tail.splitlines()] == [
        ["line", "0"], ["line", "1"], ["line", "2"]
    ]  # fmt: skip


async def test_an_oom_killed_call_carries_its_output_tail(api, events_image):
    runner = events_runner(api, events_image, "oom", "2", memory_bytes=64 * MiB)
    async with runner:
        with anyio.fail_after(HANG_S):
            outcome = await runner.call(make_request("run"), lambda e: None)
    error = outcome.result.error
    assert error is not None and error.code == "WORKER_OOM", outcome.result
    assert error.output_tail is not None and error.output_tail.count("line ") == 2


async def test_a_crashed_call_carries_its_output_tail(api, events_image, kind):
    async with served(kind, events_runner(api, events_image, "crash", "2")) as runner:
        outcome = await runner.call(make_request("run"), lambda e: None)
    error = outcome.result.error
    assert error is not None and error.code == "WORKER_CRASHED"
    assert error.output_tail is not None and error.output_tail.count("line ") == 2


async def test_floods_and_bad_lines_are_counted(api, events_image, kind):
    async with served(kind, events_runner(api, events_image, "flood", "3000")) as runner:
        received: list[WorkerEvent] = []
        flood = await runner.call(make_request("run"), received.append)
    assert flood.ok and len(received) + flood.events_dropped == 3000 and len(received) < 3000
    async with served(kind, events_runner(api, events_image, "bad")) as runner:
        bad = await runner.call(make_request("run"), lambda e: None)
    assert bad.ok and bad.events_invalid == 12 and [e.text for e in bad.events] == [
        "the valid one"
    ]  # fmt: skip


# --- the file-safety battery --------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"), TRAVERSALS, ids=[repr(t[0])[:30] for t in TRAVERSALS]
)
async def test_traversal_names_are_refused_before_any_container_starts(
    api, events_image, kind, name, expected
):
    request = unchecked_request(raw_file(name), request=make_request("run", request_id="trav-1"))
    async with served(kind, events_runner(api, events_image)) as runner:
        outcome = await runner.call(request)
        calls = [c for c in labelled_containers(api) if c["Labels"].get(LABEL_CALL) == "trav-1"]
    assert outcome.error_code == "INVALID_REQUEST" and outcome.runner_info == {"started": False}
    assert outcome.result.error is not None and expected in outcome.result.error.message
    assert calls == []


@pytest.mark.parametrize(
    ("paths", "index"), HOSTILE_MEDIA, ids=[repr(p)[:40] for p, _ in HOSTILE_MEDIA]
)
async def test_hostile_media_paths_get_malformed_output(api, events_image, kind, paths, index):
    async with served(kind, events_runner(api, events_image, "media", json.dumps(paths))) as runner:
        outcome = await runner.call(make_request("run"), lambda e: None)
    assert outcome.error_code == "MALFORMED_OUTPUT", outcome.result
    assert outcome.result.error is not None
    assert names_part(outcome.result.error.message, index), outcome.result.error.message


async def test_input_files_go_in_and_come_back(api, events_image, kind):
    doc = make_request("run").to_wire() | {"version": "1.1"}
    doc["files"] = [{"path": "data/in.csv", "content": "a,b\n"}]
    async with served(kind, events_runner(api, events_image)) as runner:
        outcome = await runner.call(ToolCallRequest.model_validate(doc))
    assert outcome.ok, outcome.result
    parts = outcome.result.to_wire()["output"]["parts"]
    assert parts[1]["path"] == "data/in.csv" and parts[1]["base64_data"] == "YSxiCg=="


# --- capabilities -----------------------------------------------------------------------


async def test_capabilities_are_learned_once_per_image(api, events_image):
    shared = CapabilityCache()  # what the owner of both runners keeps (a session's engine)
    first = events_runner(api, events_image, "lines", "1", "0", capability_cache=shared)
    assert await first.capabilities() == {"files", "events"}
    # A new runner, same worker:
    again = events_runner(api, events_image, "lines", "1", "0", capability_cache=shared)

    async def no_describe(*args: object, **kwargs: object) -> None:
        raise AssertionError("described again: the image's capabilities were not shared")

    again.describe = no_describe  # type: ignore[method-assign]
    async with again:
        assert await again.capabilities() == {"files", "events"}
        outcome = await again.call(make_request("run"), lambda e: None)
    assert outcome.ok and len(outcome.events) == 1
    await first.aclose()


@pytest.mark.parametrize("language", ["bash", "python", "node", "go"])
async def test_the_example_images_answer_as_before(api, language):
    """The 1.0 example images, asked for events: those declaring no capability get a 1.0
    call and answer it as they always did."""
    runner = DockerRunner(f"agents-runner/example-{language}:latest", api=api)
    received: list[WorkerEvent] = []
    async with runner:
        capabilities = await runner.capabilities()
        outcome = await runner.call(make_request("echo", {"text": "hi"}), received.append)
    assert outcome.ok, outcome.result
    if "events" not in capabilities:
        assert outcome.result.version == "1.0" and received == []


# --- the bash-runner's own streaming ---------------------------------------------------------


async def test_bash_runner_streams_each_line_within_200ms(api, kind):
    runner = DockerRunner(BASH_IMAGE, api=api)
    received: list[WorkerEvent] = []
    async with served(kind, runner) as served_runner:
        assert "events" in await served_runner.capabilities(), (
            "the bash-runner image does not declare `events`: rebuild it (scripts/build-images)"
        )
        with anyio.fail_after(HANG_S):
            outcome = await served_runner.call(make_request(arguments={"script": LINES_SCRIPT}),
                                               received.append)  # fmt: skip
    assert outcome.ok, outcome.result
    assert_each_line_in_time(received, 6)


async def test_bash_runner_files_in_and_collected_out_never_through_a_symlink(api, kind):
    """Input files land in the script's working directory; `collect` returns what the
    script made there, and skips a symlink it planted to a host-looking path."""
    script = (
        "mkdir -p out && tr a-z A-Z < in/data.csv > out/copy.csv && ln -s /etc/passwd out/evil.csv"
    )
    doc = make_request(arguments={"script": script}).to_wire() | {"version": "1.1"}
    doc["files"] = [{"path": "in/data.csv", "content": "a,b\n"}]
    doc["collect"] = {"patterns": ["out/*.csv"]}
    async with served(kind, DockerRunner(BASH_IMAGE, api=api)) as runner:
        assert "files" in await runner.capabilities()
        outcome = await runner.call(ToolCallRequest.model_validate(doc))
    assert outcome.ok, outcome.result
    parts = outcome.result.to_wire()["output"]["parts"]
    media = [p for p in parts if p["type"] == "media"]
    assert [(p["path"], p["base64_data"]) for p in media] == [("out/copy.csv", "QSxCCg==")]
    assert any(p["type"] == "text" and "out/evil.csv" in p["content"] for p in parts)
