"""Crash scenario 3 in a container, on the real engine: the runner is SIGKILLed while its
isolated call runs in Docker. The successor's takeover sweeps the dead owner's container
away; a contained call runs again, an external one becomes unknown_outcome."""

from __future__ import annotations

import os
import signal

import docker
import pytest

from runner.isolation.containers import LABEL_MANAGED, LABEL_OWNER, owner_token
from tests.docker.conftest import BASH_IMAGE
from tests.durability.conftest import Workspace, agent_document, wait_for

NO_DOCKER = os.environ.get("AGENTS_RUNNER_SKIP_DOCKER") == "1"
pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(NO_DOCKER, reason="AGENTS_RUNNER_SKIP_DOCKER=1"),
]


@pytest.fixture(scope="module")
def api() -> docker.APIClient:
    try:
        client = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
        client.inspect_image(BASH_IMAGE)
    except docker.errors.DockerException as exc:  # fail, not skip: CI must prove this
        pytest.fail(f"no Docker engine with {BASH_IMAGE} ({exc}); run scripts/test")
    return client


def containers_of(api: docker.APIClient, owner: str) -> list[dict]:
    """The containers of one runner process (other people's tests run on this engine too)."""
    labels = [f"{LABEL_MANAGED}=1", f"{LABEL_OWNER}={owner}"]
    return api.containers(all=True, filters={"label": labels})


@pytest.mark.parametrize("effects", ["external", "contained"])
def test_3_killed_while_the_call_runs_in_a_container(ws: Workspace, api, effects: str):
    spec = {"tag": "docker", "image": BASH_IMAGE, "timeoutSeconds": 120}
    sid = ws.start(agent_document(ws.log, effects=effects, tool="bash", spec=spec,
                                  arguments={"script": "sleep 5; echo done"}))  # fmt: skip
    runner = ws.popen("session", "resume", sid)
    owner = owner_token(runner.pid)
    assert owner is not None
    try:
        wait_for(lambda: any(c["State"] == "running" for c in containers_of(api, owner)), 120,
                 "the call's container runs")  # fmt: skip
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=30)
    try:
        assert containers_of(api, owner) != []  # orphaned: nobody is left to remove it
        report = ws.js("session", "resume", sid)  # takes over, sweeps, recovers
        assert containers_of(api, owner) == []
    finally:  # a failed test leaves nothing behind either
        for container in containers_of(api, owner):
            api.remove_container(container["Id"], force=True)
    call = ws.js("session", "show", sid)["calls"]["c0"]
    if effects == "external":
        assert report["status"] == "waiting"
        assert call["state"] == "unknown_outcome" and call["attempts"] == 1
    else:
        assert report["status"] == "completed"
        assert call["state"] == "completed" and call["attempts"] == 2
        assert "done" in str(call["result"]["content"])
