"""`runtime` on a docker spec: it reaches the container's limits (and so the warm pool's
shelf key), unset means runc, and a malformed name is a validation error at its path."""

from __future__ import annotations

import pytest

from runner.session import AgentError, DockerSpec, parse_agent
from runner.session.execute import container_limits, runner_for_spec

IMAGE = "agents-runner/bash-runner:latest"


def test_a_docker_spec_names_the_runtime_of_its_containers():
    spec = DockerSpec.model_validate({"tag": "docker", "image": IMAGE, "runtime": "runsc"})
    assert container_limits(spec).runtime == "runsc"
    runner = runner_for_spec(spec)
    assert runner.limits.runtime == "runsc"  # type: ignore[attr-defined]
    assert container_limits(DockerSpec(image=IMAGE)).runtime == "runc"


def test_the_runtime_is_part_of_the_limits_a_shelf_is_keyed_by():
    runc, runsc = (
        container_limits(DockerSpec(image=IMAGE, runtime=rt)) for rt in ("runc", "runsc")
    )
    assert repr(runc) != repr(runsc)
    assert runsc.info()["runtime"] == "runsc" and runsc.info()["seccomp"] == "gvisor"
    assert runc.info()["seccomp"] == "default"


@pytest.mark.parametrize("name", ["", "run sc", "-runsc", "runsc;rm", "x" * 65])
def test_a_malformed_runtime_is_refused_at_its_path(name: str):
    document = {
        "slug": "bad-runtime",
        "provider": {"tag": "scripted", "responses": [{"text": "hi"}]},
        "tools": [{"name": "bash", "kind": "bash", "parameters": {"type": "object"}}],
        "toolCallPolicyConfig": {
            "default": {"tag": "runIsolated", "spec": {"tag": "docker", "image": IMAGE,
                                                       "runtime": name}},
        },
    }  # fmt: skip
    with pytest.raises(AgentError) as caught:
        parse_agent(document)
    assert "runtime" in str(caught.value)
