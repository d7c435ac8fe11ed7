"""A RunIsolated bash call through the real Docker engine, injected back as a completion."""

from __future__ import annotations

import anyio

from runner.session import parse_agent, with_durable_workflows
from runner.stores import SQLiteStore
from tests.docker.conftest import BASH_IMAGE, labelled_containers

SCRIPT = {"type": "object", "properties": {"script": {"type": "string"}}, "required": ["script"]}
BASH = {"name": "bash", "kind": "bash", "parameters": SCRIPT}


def agent(tmp_path, script: str, timeout_s: float = 60):
    spec = {"tag": "docker", "image": BASH_IMAGE, "timeoutSeconds": timeout_s}
    document = {
        "slug": "isolated",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": "sh", "name": "bash", "arguments": {"script": script}}]},
            {"text": "the sandbox said: {{result:sh}}"}]},
        "tools": [BASH],
        "toolCallPolicyConfig": {"default": {"tag": "runIsolated", "spec": spec}},
    }  # fmt: skip
    return with_durable_workflows(parse_agent(document), SQLiteStore(tmp_path / "s.db"))


def test_a_bash_call_runs_in_the_container_and_its_result_reaches_the_model(api, tmp_path):
    durable = agent(tmp_path, "echo uid=$(id -u); ls /sys/class/net")
    report = anyio.run(durable.run, "look around")
    call = report.session.calls["sh"]
    assert call.state == "completed" and call.attempts == 1
    assert call.result.content["stdout"] == "uid=10001\nlo\n"
    assert report.status == "completed"
    assert report.session.final_answer.startswith('the sandbox said: {"exit_code": 0')
    assert labelled_containers(api) == []


def test_a_runner_timeout_is_a_failed_call_the_model_sees(api, tmp_path):
    durable = agent(tmp_path, "sleep 60", timeout_s=1.5)
    report = anyio.run(durable.run, "wait")
    call = report.session.calls["sh"]
    assert call.state == "failed" and call.result.error_code == "WORKER_TIMEOUT"
    assert "[error WORKER_TIMEOUT]" in report.session.final_answer
    assert labelled_containers(api) == []
