"""The abuse suite: hostile bash scripts sent through DockerRunner to the bash-runner image
with the default limits (docs/abuse-cases.md lists every case and what contains it).

`attack()` is the one way a case runs a call. Besides the outcome it checks what every
case must leave true: the call's container is gone, no host process is left in the
container's cgroup, and the host runner's peak memory grew by less than RSS_BOUND_BYTES
during the call (the flood cases are the ones that push on it).

Like tests/docker, these fail (not skip) when no engine answers; AGENTS_RUNNER_SKIP_DOCKER=1
skips them explicitly.

Every case that reaches the engine runs under each of RUNTIMES (runc and gVisor's runsc):
the `case_runtime` fixture is parametrized for every test that uses `api`, and `run_call`
builds its runner under that runtime. A case whose runsc variant differs takes
`case_runtime` and asserts that variant explicitly (docs/abuse-cases.md, "runsc").
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from envelopes.v1 import ToolCallRequest
from runner.isolation import CallOutcome, ContainerLimits, DockerRunner
from runner.isolation.containers import LABEL_CALL, LABEL_MANAGED, LABEL_OWNER, my_owner_token
from tests.conftest import make_request
from tests.docker.conftest import (
    BASH_IMAGE,
    RUNTIMES,
    api,
    loopback_server,
    no_container_left_behind,
    require_runtime,
)

# Fixtures shared with tests/docker.
__all__ = ["api", "loopback_server", "no_container_left_behind"]

MiB = 1024 * 1024
#: The host runner's peak RSS may grow by at most this much during one call (or one batch
#: of concurrent calls). The runner keeps max_result_bytes of stdout and a 128 KiB window
#: of stderr whatever the worker sends; 64 MiB leaves room for the interpreter's own churn.
RSS_BOUND_BYTES = 64 * MiB
#: Result budget of a case unless it says otherwise (the default request's).
RESULT_BYTES = 64 * 1024


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each case that reaches the engine (it uses `api`) once per runtime."""
    if "api" in metafunc.fixturenames:
        metafunc.parametrize("case_runtime", RUNTIMES, indirect=True)


#: The runtime of the case running now (set by `case_runtime`).
_runtime = "runc"


@pytest.fixture(autouse=True)
def case_runtime(request: pytest.FixtureRequest) -> Iterator[str]:
    """The runtime this case runs its calls under: runc, or runsc once the engine is seen
    to have it; runc for a case that never reaches the engine."""
    global _runtime
    runtime = getattr(request, "param", "runc")
    if runtime != "runc":
        require_runtime(request.getfixturevalue("api"), runtime)
    _runtime = runtime
    try:
        yield runtime
    finally:
        _runtime = "runc"


def under_runtime(limits: ContainerLimits | None = None) -> ContainerLimits:
    """`limits` (else the defaults) under the runtime of the case running now."""
    return dataclasses.replace(limits or ContainerLimits(), runtime=_runtime)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip = os.environ.get("AGENTS_RUNNER_SKIP_DOCKER") == "1"
    for item in items:
        if "tests/abuse/" in str(item.fspath):
            item.add_marker(pytest.mark.docker)
            if skip:
                item.add_marker(pytest.mark.skip(reason="AGENTS_RUNNER_SKIP_DOCKER=1"))


class PeakRss:
    """The high-water mark of this process's resident memory, reset on demand
    (`/proc/self/clear_refs` with 5 resets VmHWM to the current RSS)."""

    @staticmethod
    def _status(field: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise AssertionError(f"{field} missing from /proc/self/status")

    def reset(self) -> int:
        Path("/proc/self/clear_refs").write_text("5")
        return self._status("VmRSS")

    def peak(self) -> int:
        return self._status("VmHWM")


PEAK = PeakRss()


@dataclass(frozen=True)
class Attack:
    outcome: CallOutcome
    rss_growth: int  # peak RSS during the call minus RSS before it

    @property
    def content(self) -> dict:
        """The bash tool's JSON content; the call must have been answered ok."""
        assert self.outcome.ok, (self.outcome.result, self.outcome.stderr_tail[-500:])
        return self.outcome.result.output.content

    @property
    def output(self) -> str:
        return self.content["stdout"] + self.content["stderr"]


def container_processes(container: str) -> list[int]:
    """Host pids still in the cgroup of a container (its id, or the 12-char prefix)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cgroups = (entry / "cgroup").read_text()
            except OSError:  # exited meanwhile
                continue
            if f"/docker/{container}" in cgroups or f"docker-{container}" in cgroups:
                pids.append(int(entry.name))
    return pids


def assert_call_left_nothing(api: docker.APIClient, call_id: str, outcome: CallOutcome) -> None:
    labels = [f"{LABEL_MANAGED}=1", f"{LABEL_OWNER}={my_owner_token()}", f"{LABEL_CALL}={call_id}"]
    assert api.containers(all=True, filters={"label": labels}) == [], f"{call_id} left a container"
    container = outcome.runner_info.get("container")
    if container:
        assert container_processes(container) == [], f"{call_id} left processes on the host"


async def run_call(
    api: docker.APIClient,
    request: ToolCallRequest,
    limits: ContainerLimits | None = None,
    runner: DockerRunner | None = None,
) -> CallOutcome:
    """One call through a fresh DockerRunner under the case's runtime (or `runner`);
    asserts it left nothing."""
    runner = runner or DockerRunner(BASH_IMAGE, under_runtime(limits), api=api)
    outcome = await runner.call(request)
    assert_call_left_nothing(api, request.id, outcome)
    return outcome


def bash_request(
    script: str,
    *,
    seconds: float = 20,
    max_result_bytes: int = RESULT_BYTES,
    stdin: str | None = None,
) -> ToolCallRequest:
    arguments = {"script": script} | ({"stdin": stdin} if stdin is not None else {})
    return make_request(arguments=arguments, seconds=seconds, max_result_bytes=max_result_bytes,
                        request_id=f"abuse-{uuid.uuid4().hex[:12]}")  # fmt: skip


async def attack(
    api: docker.APIClient,
    script: str,
    *,
    limits: ContainerLimits | None = None,
    seconds: float = 20,
    max_result_bytes: int = RESULT_BYTES,
    stdin: str | None = None,
) -> Attack:
    """Send `script` as a bash call and return its outcome with the runner's RSS growth,
    which must stay under RSS_BOUND_BYTES."""
    request = bash_request(script, seconds=seconds, max_result_bytes=max_result_bytes,
                           stdin=stdin)  # fmt: skip
    before = PEAK.reset()
    outcome = await run_call(api, request, limits)
    growth = PEAK.peak() - before
    assert growth < RSS_BOUND_BYTES, f"the runner grew by {growth / MiB:.1f} MiB during the call"
    return Attack(outcome, growth)
