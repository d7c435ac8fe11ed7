"""The bash-runner and python-runner images' own workers pass worker-check, in their
images and as local processes."""

from __future__ import annotations

import json

import pytest

from runner.conformance import Report
from tests.conformance.conftest import PYTHON, docker_runner, local_runner, require_image, run_check
from tests.conftest import REPO

RUNNER_FIXTURES = {
    "bash-runner": {"bash": {"script": "echo hello from worker-check; printf '%0600d' 0"}},
    "python-runner": {"python": {"code": "print('hello from worker-check' + '.' * 600)"}},
}


@pytest.fixture(
    scope="module",
    params=[(n, r) for n in RUNNER_FIXTURES for r in ("local", "docker")],
    ids=lambda p: f"{p[0]}-{p[1]}",
)
def runner_report(request: pytest.FixtureRequest) -> tuple[str, Report]:
    name, kind = request.param
    if kind == "local":
        runner = local_runner(PYTHON, str(REPO / "images" / name / "worker.py"))
    else:
        engine = request.getfixturevalue("engine")
        runner = docker_runner(require_image(engine, f"agents-runner/{name}:latest"))
    return name, run_check(runner, RUNNER_FIXTURES[name])


def test_the_runner_image_worker_passes(runner_report: tuple[str, Report]) -> None:
    name, report = runner_report
    assert report.failed() == [], json.dumps(report.to_dict(), indent=1)
    tool = next(iter(RUNNER_FIXTURES[name]))
    checks = report.by_id()
    assert checks[f"call.{tool}"].status == "pass"
    assert checks[f"limit.{tool}"].status == "pass"
