"""`agents-runner serve --pool-size 1` against the real engine: the worker loop runs a
Docker-isolated call in a container of the warm pool, started before the call was made,
and SIGTERM leaves no container of the server behind."""

from __future__ import annotations

import re
from pathlib import Path

import docker

from runner.isolation.containers import LABEL_MANAGED, LABEL_OWNER, LABEL_ROLE, owner_token
from tests.docker.conftest import BASH_IMAGE
from tests.server.processes import start_serve, wait_for, wait_for_status, write_json

# The container's id, read from inside it: the engine mounts its hostname file from the
# container's own directory.
WHERE = "grep -o 'containers/[0-9a-f]*/hostname' /proc/self/mountinfo | head -1"
SCRIPT = {"type": "object", "properties": {"script": {"type": "string"}}, "required": ["script"]}


def pooled_agent(directory: Path) -> None:
    directory.mkdir()
    write_json(directory / "pooled.json", {
        "slug": "pooled",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": "sh", "name": "bash", "arguments": {"script": WHERE}}]},
            {"text": "done"}]},
        "tools": [{"name": "bash", "kind": "bash", "parameters": SCRIPT}],
        "toolCallPolicyConfig": {"default": {"tag": "runIsolated", "spec": {
            "tag": "docker", "image": BASH_IMAGE, "timeoutSeconds": 60}}},
    })  # fmt: skip


def containers(api: docker.APIClient, owner: str, role: str | None = None) -> set[str]:
    found = api.containers(all=True, filters={"label": [f"{LABEL_MANAGED}=1",
                                                        f"{LABEL_OWNER}={owner}"]})  # fmt: skip
    return {c["Id"] for c in found if role is None or c["Labels"][LABEL_ROLE] == role}


def test_serve_runs_docker_calls_from_its_warm_pool_and_drains_it(
    api: docker.APIClient, tmp_path: Path
) -> None:
    pooled_agent(tmp_path / "agents")
    served = start_serve(str(tmp_path / "s.db"), tmp_path, "--no-auth", "--agents", "agents",
                         "--pool-size", "1", "--poll-seconds", "0.05")  # fmt: skip
    try:
        owner = owner_token(served.process.pid)
        assert owner is not None
        with served.client() as http:

            def run_one() -> str:
                made = http.post("/v1/sessions", json={"agent": "pooled.json", "prompt": "go"})
                assert made.status_code == 201, made.text
                done = wait_for_status(http, made.json()["session_id"], "completed", "failed")
                call = done["calls"]["sh"]
                assert call["state"] == "completed", call
                found = re.fullmatch(r"containers/([0-9a-f]{64})/hostname\n",
                                     call["result"]["content"]["stdout"])  # fmt: skip
                assert found, call["result"]
                return found.group(1)

            first = run_one()  # the shelf is made by the first call
            wait_for(lambda: containers(api, owner, "pool") - {first}, what="a warm container")
            warm = containers(api, owner, "pool") - {first}
            second = run_one()
            assert second in warm, "the call did not run in the container started ahead"
            assert second != first
            # The shelf is refilled: the drain has an idle container to remove.
            wait_for(lambda: containers(api, owner, "pool") - {first, second},
                     what="the shelf refilled")  # fmt: skip
    finally:
        code = served.stop()
    assert code == 0, served.stderr()
    assert containers(api, owner) == set(), served.stderr()
    assert "warm pool" in served.stderr() and "Traceback" not in served.stderr()
