"""Docker tests run against the real engine and the images of scripts/build-images.

They fail (not skip) when no engine answers, so a CI run cannot pass without proving
them. Set AGENTS_RUNNER_SKIP_DOCKER=1 to skip them explicitly on a machine without Docker.

The containment, abuse and worker-check suites run under each of RUNTIMES (the `runtime`
fixture); the runsc variants fail when the engine has no runsc (scripts/test registers
it: scripts/lib/engine.sh's ensure_runsc_runtime), unless AGENTS_RUNNER_RUNSC=off skips them.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import docker
import pytest

# testcontainers' Ryuk reaper runs from an image pulled from Docker Hub, which these
# machines cannot reach; our fixtures remove what they create instead.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

from testcontainers.core.image import DockerImage

from runner.isolation.containers import LABEL_MANAGED, LABEL_OWNER, my_owner_token
from tests.conftest import MISBEHAVE

BASH_IMAGE = "agents-runner/bash-runner:latest"
PYTHON_IMAGE = "agents-runner/python-runner:latest"
#: The runtimes the containment, abuse and worker-check suites run under.
RUNTIMES = ("runc", "runsc")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip = os.environ.get("AGENTS_RUNNER_SKIP_DOCKER") == "1"
    for item in items:
        if "tests/docker/" in str(item.fspath):
            item.add_marker(pytest.mark.docker)
            if skip:
                item.add_marker(pytest.mark.skip(reason="AGENTS_RUNNER_SKIP_DOCKER=1"))


def engine_with(*images: str) -> docker.APIClient:
    """A client of the running engine once it is seen to hold `images`; the test fails
    (or skips, with AGENTS_RUNNER_SKIP_DOCKER=1) saying what is missing and how to get it."""
    if os.environ.get("AGENTS_RUNNER_SKIP_DOCKER") == "1":
        pytest.skip("AGENTS_RUNNER_SKIP_DOCKER=1")
    try:
        client = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"no Docker engine answers ({exc}); run scripts/test, which starts one")
    for image in images:
        try:
            client.inspect_image(image)
        except docker.errors.ImageNotFound:
            pytest.fail(f"image {image} is missing; run scripts/build-images")
    return client


@pytest.fixture(scope="session")
def api() -> docker.APIClient:
    return engine_with(BASH_IMAGE, PYTHON_IMAGE)


def require_runtime(api: docker.APIClient, runtime: str) -> str:
    """`runtime`, once the engine is seen to have it (runc: always)."""
    if runtime == "runc":
        return runtime
    have = api.info().get("Runtimes") or {}
    if runtime not in have:
        why = (f"the engine has no runtime {runtime!r} (it has {sorted(have)}); scripts/test"
               " registers runsc (scripts/lib/engine.sh's ensure_runsc_runtime)")  # fmt: skip
        if os.environ.get("AGENTS_RUNNER_RUNSC") == "off":
            pytest.skip(f"AGENTS_RUNNER_RUNSC=off: {why}")
        pytest.fail(why)
    return runtime


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest, api: docker.APIClient) -> str:
    """Each runtime of RUNTIMES in turn, the engine having it."""
    return require_runtime(api, request.param)


def labelled_containers(api: docker.APIClient) -> list[dict]:
    """Containers this test process made (other processes may be running tests too)."""
    labels = [f"{LABEL_MANAGED}=1", f"{LABEL_OWNER}={my_owner_token()}"]
    return api.containers(all=True, filters={"label": labels})


async def wait_until(
    condition: Callable[[], bool], timeout_s: float = 30.0, interval_s: float = 0.05
) -> None:
    """Poll the engine until `condition()` holds; fail after `timeout_s` (a hang, not a
    speed judgement). For facts only the engine knows, such as a background removal."""
    with anyio.fail_after(timeout_s):
        while True:
            if condition():
                return
            await anyio.sleep(interval_s)


@pytest.fixture(scope="session", autouse=True)
def no_container_left_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the whole suite, not one container with this project's labels remains."""
    if os.environ.get("AGENTS_RUNNER_SKIP_DOCKER") == "1":
        yield
        return
    api = request.getfixturevalue("api")
    yield
    left = labelled_containers(api)
    assert left == [], f"containers left behind: {[c['Id'][:12] for c in left]}"


@pytest.fixture(scope="session")
def misbehave_image(
    api: docker.APIClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The misbehaving worker on top of the python-runner image, built with testcontainers."""
    context: Path = tmp_path_factory.mktemp("misbehave-image")
    shutil.copy(MISBEHAVE, context / "misbehave.py")
    (context / "Dockerfile").write_text(
        f"FROM {PYTHON_IMAGE}\n"
        "COPY misbehave.py /opt/misbehave.py\n"
        'ENTRYPOINT ["python3", "/opt/misbehave.py"]\n'
        'CMD ["ok"]\n'
    )
    with DockerImage(path=str(context), tag="agents-runner-test/misbehave:latest",
                     clean_up=True) as image:  # fmt: skip
        yield str(image)


@pytest.fixture
def loopback_server() -> Iterator[tuple[int, list[object]]]:
    """A TCP server on the host's 127.0.0.1; yields its port and the connections it saw."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            accepted.append(peer)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()
