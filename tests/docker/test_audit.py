"""Audit records of calls through the real Docker engine, cold and from the warm pool:
the image's digest, the runtime and limits the container ran with, its network, the
outcome; and no argument value or output in the file or the store, whatever the call."""

from __future__ import annotations

import anyio
import pytest

from runner.isolation import (
    AuditedRunner,
    ContainerLimits,
    DockerRunner,
    JsonLinesAuditSink,
    PoolSettings,
    WarmPool,
)
from runner.isolation.audit import AuditQuery, canonical_sha256, read_audit_file
from runner.session import parse_agent, with_durable_workflows
from runner.stores import audit_log_of
from tests.conftest import make_request
from tests.docker.conftest import BASH_IMAGE, labelled_containers
from tests.session.test_audit import raw_audit_rows

pytestmark = pytest.mark.anyio

CANARY = "canary-0b9e41d2-in-docker"


def bash(script: str, seconds: float = 30, n: int = 1):
    return make_request(arguments={"script": script}, seconds=seconds, request_id=f"call-{n}")


@pytest.mark.parametrize(("arguments", "seconds", "outcome"), [
    ({"script": f"echo {CANARY}"}, 30, "ok"),
    ({"not_a_script": CANARY}, 30, "INVALID_ARGUMENTS"),
    ({"script": f"echo {CANARY}; sleep 60"}, 1.5, "WORKER_TIMEOUT"),
])  # fmt: skip
async def test_a_cold_docker_call_is_recorded(api, tmp_path, arguments, seconds, outcome):
    path = tmp_path / "audit.jsonl"
    request = make_request(arguments=arguments, seconds=seconds)
    async with DockerRunner(BASH_IMAGE) as runner:
        result = await AuditedRunner(runner, JsonLinesAuditSink(path)).call(request)
    assert (result.error_code or "ok") == outcome
    if outcome == "ok":
        assert CANARY in result.result.output.to_wire()["content"]["stdout"]
    [record] = read_audit_file(path)
    assert (record.runner, record.image, record.outcome) == ("docker", BASH_IMAGE, outcome)
    assert record.image_id == api.inspect_image(BASH_IMAGE)["Id"]
    assert record.runtime == "runc" and record.network == {"mode": "none"}
    assert record.limits["memory_bytes"] == ContainerLimits().memory_bytes
    assert record.limits["read_only_root"] is True
    assert record.arguments_sha256 == canonical_sha256(arguments)
    assert CANARY.encode() not in path.read_bytes()
    assert labelled_containers(api) == []


async def test_pooled_calls_are_recorded_one_each(api, tmp_path):
    path = tmp_path / "audit.jsonl"
    sink = JsonLinesAuditSink(path)
    async with WarmPool(PoolSettings(size=2)) as pool:
        runner = AuditedRunner(pool.pooled(DockerRunner(BASH_IMAGE)), sink)
        assert await pool.filled(timeout_s=120)
        outcomes = []

        async def one(n: int) -> None:
            outcomes.append(await runner.call(bash(f"echo {CANARY}-{n}", n=n)))

        async with anyio.create_task_group() as group:
            for n in range(3):
                group.start_soon(one, n)
        timed_out = await runner.call(bash("sleep 60", seconds=1.5, n=9))
    assert all(o.ok for o in outcomes) and timed_out.error_code == "WORKER_TIMEOUT"
    records = {r.request_id: r for r in read_audit_file(path)}
    assert set(records) == {"call-0", "call-1", "call-2", "call-9"}
    assert {r.runner for r in records.values()} == {"docker"}
    assert records["call-9"].outcome == "WORKER_TIMEOUT"
    assert all(r.image_id == api.inspect_image(BASH_IMAGE)["Id"] for r in records.values())
    assert CANARY.encode() not in path.read_bytes()
    assert labelled_containers(api) == []


def test_a_session_audits_its_docker_calls_to_its_store(api, durable_store):
    spec = {"tag": "docker", "image": BASH_IMAGE, "timeoutSeconds": 60}
    document = {
        "slug": "audited",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": "sh", "name": "bash",
                             "arguments": {"script": f"echo {CANARY}"}}]},
            {"text": "said {{result:sh}}"}]},
        "tools": [{"name": "bash", "kind": "bash", "parameters": {"type": "object"}}],
        "toolCallPolicyConfig": {"default": {"tag": "runIsolated", "spec": spec}},
    }  # fmt: skip
    agent = with_durable_workflows(parse_agent(document), durable_store)
    report = anyio.run(agent.run, "look")
    assert CANARY in report.session.final_answer
    [record] = audit_log_of(durable_store).audit_records(AuditQuery())
    assert (record.session_id, record.call_id, record.tool) == (report.session.id, "sh", "bash")
    assert (record.runner, record.outcome, record.runtime) == ("docker", "ok", "runc")
    assert CANARY.encode() not in raw_audit_rows(durable_store)
    assert labelled_containers(api) == []
