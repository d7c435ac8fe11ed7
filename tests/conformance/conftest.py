"""worker-check against real workers: the four examples and the two runner images through
both runners, and three workers broken on purpose (tests/conformance/workers/).

Each worker is checked once per runner (module-scoped fixtures) and the tests assert on
the report, so the battery's cost is paid once. Docker runs need the engine and the
images of scripts/build-images; like tests/docker they fail, not skip, without them
(AGENTS_RUNNER_SKIP_DOCKER=1 skips them explicitly).
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import docker
import pytest

from runner.conformance import VERBOSE_ENV, Report, check_worker, load_fixtures
from runner.isolation import ContainerLimits, DockerRunner, LocalProcessRunner
from runner.isolation.base import ExchangeRunner
from tests.conftest import REPO
from tests.docker.conftest import labelled_containers

EXAMPLES = REPO / "examples" / "workers"
FIXTURES = EXAMPLES / "fixtures.json"
BROKEN = Path(__file__).resolve().parent / "workers"
PYTHON = sys.executable
#: Generous for a shared 2-core machine; only the hanging worker ever waits this long.
PROBE_TIMEOUT_S = 15.0


def run_check(
    runner: ExchangeRunner, fixtures: dict, probe_timeout_s: float = PROBE_TIMEOUT_S
) -> Report:
    return anyio.run(lambda: check_worker(runner, fixtures, probe_timeout_s=probe_timeout_s))


def local_runner(*argv: str, env: dict[str, str] | None = None) -> LocalProcessRunner:
    return LocalProcessRunner(list(argv), env={**VERBOSE_ENV, **(env or {})})


def docker_runner(image: str, runtime: str = "runc") -> DockerRunner:
    return DockerRunner(image, ContainerLimits(env=VERBOSE_ENV, runtime=runtime))


def require_program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed; the local runs of the examples need it"
            f" (Debian: apt-get install {'nodejs' if name == 'node' else name})"
        )
    return path


@pytest.fixture(scope="session")
def fixtures() -> dict:
    return load_fixtures(FIXTURES)


@pytest.fixture(scope="session")
def engine() -> Iterator[docker.APIClient]:
    if os.environ.get("AGENTS_RUNNER_SKIP_DOCKER") == "1":
        pytest.skip("AGENTS_RUNNER_SKIP_DOCKER=1")
    try:
        api = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
        api.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"no Docker engine answers ({exc}); run scripts/test, which starts one")
    yield api
    left = labelled_containers(api)
    assert left == [], f"containers left behind: {[c['Id'][:12] for c in left]}"


def require_image(api: docker.APIClient, image: str) -> str:
    try:
        api.inspect_image(image)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {image} is missing; run scripts/build-images")
    return image


@pytest.fixture(scope="session")
def go_binary(engine: docker.APIClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The Go example's static binary, copied out of its image for the local runner (the
    host needs no Go toolchain)."""
    image = require_image(engine, "agents-runner/example-go:latest")
    container = engine.create_container(image)["Id"]
    try:
        stream, _ = engine.get_archive(container, "/usr/local/bin/example-go")
        target = tmp_path_factory.mktemp("example-go")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            archive.extract("example-go", target)
    finally:
        engine.remove_container(container, force=True)
    yield target / "example-go"
