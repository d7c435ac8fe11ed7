"""agents-runner/worker-check: the battery as an image, run the way an author with no
Python runs it (`docker run` with the engine's socket mounted), against the Go example's
image on the real engine. scripts/build-images builds it (after agents-runner/worker,
whose installation of the package it reuses); a stale image fails here."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import docker
import pytest

from tests.conformance.conftest import FIXTURES, require_image

IMAGE = "agents-runner/worker-check:latest"
TARGET = "agents-runner/example-go:latest"
SOCKET = "/var/run/docker.sock"


def docker_run(api: docker.APIClient, *args: str) -> subprocess.CompletedProcess[str]:
    cli = shutil.which("docker")
    if cli is None:
        pytest.fail("the docker CLI is missing; this test runs the image as an author does")
    if not Path(SOCKET).exists():
        pytest.fail(f"{SOCKET} is missing: the image reaches the engine through that socket")
    require_image(api, IMAGE)
    require_image(api, TARGET)
    name = f"worker-check-test-{uuid.uuid4().hex[:12]}"
    argv = [cli, "run", "--rm", "--name", name, "-v", f"{SOCKET}:{SOCKET}", *args]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=300)
    finally:
        subprocess.run([cli, "rm", "-f", name], capture_output=True)  # after a timeout


def test_the_image_checks_a_worker_image_with_a_mounted_fixture_file(
    engine: docker.APIClient,
) -> None:
    done = docker_run(
        engine, "-v", f"{FIXTURES}:/fixtures.json:ro", IMAGE,
        "--runner", "docker", "--image", TARGET, "--fixture", "/fixtures.json",
        "--strict", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["target"], report["ok"], report["strict"]) == (TARGET, True, True)
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["call.echo"]["status"] == "pass"
    assert checks["call.ledger_append"]["status"] == "pass"
    assert checks["request.duplicate_keys.strict"]["status"] == "pass"


def test_the_image_exits_1_on_a_failed_check_with_fixture_json(engine: docker.APIClient) -> None:
    fixtures = json.dumps({"echo": {"text": ["not", "a", "string"]}})
    done = docker_run(
        engine, IMAGE, "--runner", "docker", "--image", TARGET, "--fixture-json", fixtures
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "call.echo" in done.stdout and "INVALID_ARGUMENTS" in done.stdout
    assert "required check(s) failed" in done.stdout
