"""The bash-runner and python-runner images speak 1.1 in their hardened container (read-only
root, /tmp the only writable place): the checks of tests/images/test_runner_workers.py,
with the worker started by `docker run -i` and its stdout and stderr read here, so they
prove the images themselves rather than a runner's parsing (tests/docker/
test_files_events.py covers DockerRunner and the pool)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.docker.conftest import BASH_IMAGE, PYTHON_IMAGE
from tests.images.test_runner_workers import (
    Running,
    check_1_0_is_unchanged,
    check_a_killed_call_streamed_first,
    check_bash_files_collect_and_events,
    check_describe,
    check_lines_stream_while_the_script_runs,
    check_python_runner,
)

HARDENING = ["--read-only", "--tmpfs", "/tmp:rw,nosuid,nodev,size=64m,mode=1777",
             "--network", "none", "--cap-drop", "ALL",
             "--security-opt", "no-new-privileges", "--pids-limit", "128"]  # fmt: skip


class Containers:
    def __init__(self) -> None:
        self.names: list[str] = []

    def starter(self, image: str) -> Callable[[dict], Running]:
        def start(doc: dict) -> Running:
            name = f"agents-runner-test-1-1-{uuid.uuid4().hex[:12]}"
            self.names.append(name)
            argv = ["docker", "run", "--rm", "-i", "--name", name, *HARDENING, image]
            return Running(argv, doc, env=None)

        return start

    def touch(self, path: str) -> None:
        subprocess.run(["docker", "exec", self.names[-1], "touch", path], check=True,
                       capture_output=True, timeout=60)  # fmt: skip

    def remove(self) -> None:
        for name in self.names:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)


@pytest.fixture
def containers(api) -> Iterator[Containers]:  # `api` fails the test without engine or images
    made = Containers()
    yield made
    made.remove()


def test_bash_runner_files_collect_and_events(containers: Containers) -> None:
    check_bash_files_collect_and_events(containers.starter(BASH_IMAGE), "/tmp")


def test_bash_runner_streams_lines_while_the_script_runs(containers: Containers) -> None:
    check_lines_stream_while_the_script_runs(
        containers.starter(BASH_IMAGE), lambda: containers.touch("/tmp/go")
    )


def test_bash_runner_streamed_what_a_killed_call_printed(containers: Containers) -> None:
    check_a_killed_call_streamed_first(containers.starter(BASH_IMAGE))


def test_python_runner_files_collect_and_events(containers: Containers) -> None:
    check_python_runner(containers.starter(PYTHON_IMAGE))


@pytest.mark.parametrize("image", [BASH_IMAGE, PYTHON_IMAGE])
def test_describe_declares_1_1_capabilities(containers: Containers, image: str) -> None:
    check_describe(containers.starter(image))


def test_a_1_0_call_is_answered_as_before(containers: Containers) -> None:
    check_1_0_is_unchanged(containers.starter(BASH_IMAGE))
