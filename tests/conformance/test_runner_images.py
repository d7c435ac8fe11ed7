"""The bash-runner and python-runner images' own workers pass worker-check at the `strict`
level, in their images and as local processes, with the 1.1 checks of the capabilities
they declare (files, events) run, not skipped."""

from __future__ import annotations

import json

import pytest

from runner.conformance import Report
from tests.conformance.conftest import PYTHON, docker_runner, local_runner, require_image, run_check
from tests.conftest import REPO
from tests.docker.conftest import require_runtime

#: Each prints over 512 bytes (for limit.<tool>) and then a flood of lines, which the
#: events probe's small budget (10 a second, 4096 bytes) makes the worker coalesce or drop.
RUNNER_FIXTURES = {
    "bash-runner": {
        "bash": {
            "script": "echo hello from worker-check; printf '%0600d\\n' 0;"
            " for i in $(seq 1 3000); do echo line $i; done"
        }
    },
    "python-runner": {
        "python": {
            "code": "print('hello from worker-check' + '.' * 600)\n"
            "for i in range(3000): print('line', i)"
        }
    },
}


@pytest.fixture(
    scope="module",
    # docker: under runc; docker-runsc: under gVisor (tests/docker/conftest.py's RUNTIMES).
    params=[(n, r) for n in RUNNER_FIXTURES for r in ("local", "docker", "docker-runsc")],
    ids=lambda p: f"{p[0]}-{p[1]}",
)
def runner_report(request: pytest.FixtureRequest) -> tuple[str, Report]:
    name, kind = request.param
    if kind == "local":
        runner = local_runner(PYTHON, str(REPO / "images" / name / "worker.py"))
    else:
        engine = request.getfixturevalue("engine")
        runtime = require_runtime(engine, "runsc") if kind == "docker-runsc" else "runc"
        runner = docker_runner(require_image(engine, f"agents-runner/{name}:latest"), runtime)
    return name, run_check(runner, RUNNER_FIXTURES[name])


def test_the_runner_image_worker_passes(runner_report: tuple[str, Report]) -> None:
    name, report = runner_report
    assert report.failed(strict=True) == [], json.dumps(report.to_dict(), indent=1)
    tool = next(iter(RUNNER_FIXTURES[name]))
    checks = report.by_id()
    assert checks[f"call.{tool}"].status == "pass"
    assert checks[f"limit.{tool}"].status == "pass"
    assert checks["describe.capabilities"].detail == "1.1; capabilities: events, files"
    ran = [i for i in checks if i.startswith(("files.", "events."))]
    assert "files" not in checks and "events" not in checks  # run, not skipped
    assert {checks[i].status for i in ran} == {"pass"}
    assert {"files.roundtrip", "files.dotdot", "events.framing", "events.budget"} <= set(ran)
