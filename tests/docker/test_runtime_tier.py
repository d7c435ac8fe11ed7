"""The runtime tier against the real engine: a call runs under the runtime its limits name
(runc or gVisor's runsc), warm or cold, from the library, an agent file's docker spec or
the CLI, and a runtime the engine lacks is a typed WORKER_START_FAILED naming it and how
to install it, never a run under another. tests/docker/test_containment.py proves the
sandbox itself under both runtimes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.isolation import ContainerLimits, DockerRunner, EngineRuntimes, PoolSettings, WarmPool
from runner.isolation.runtimes import unknown_runtime
from tests.conftest import REPO, make_request
from tests.docker.conftest import BASH_IMAGE, labelled_containers, require_runtime

pytestmark = pytest.mark.anyio
CLI = [sys.executable, "-m", "runner.cli"]
UNAME = {"script": "uname -r"}
SCRIPT = {"type": "object", "properties": {"script": {"type": "string"}}, "required": ["script"]}


def kernel(outcome) -> str:
    assert outcome.ok, (outcome.result, outcome.stderr_tail)
    return outcome.result.output.content["stdout"].strip()


def expected_kernel(runtime: str) -> str:
    return os.uname().release if runtime == "runc" else "4.4.0"  # gVisor's own


async def test_a_runtime_the_engine_lacks_is_a_start_failure_never_a_fallback(api):
    runner = DockerRunner(BASH_IMAGE, ContainerLimits(runtime="no-such-runtime"), api=api)
    outcome = await runner.call(make_request(arguments=UNAME))
    assert outcome.error_code == "WORKER_START_FAILED", outcome.result
    message = outcome.result.error.message
    assert "no runtime 'no-such-runtime'" in message
    have = ", ".join(sorted(api.info()["Runtimes"]))
    assert f"(it has: {have})" in message and "/etc/docker/daemon.json" in message
    assert "container" not in outcome.runner_info  # refused before any create
    assert outcome.runner_info["runtime"] == "no-such-runtime"
    assert labelled_containers(api) == []


async def test_the_engines_own_refusal_is_explained_the_same_way(api):
    # The list kept from `docker info` says the runtime exists (as after it was removed
    # from the engine): the create's "Unknown runtime" error gives the same message.
    known = EngineRuntimes()
    known.keep(api, {**known.listed(api), "ghost": {"path": "/nonexistent"}})
    runner = DockerRunner(BASH_IMAGE, ContainerLimits(runtime="ghost"), api=api, runtimes=known)
    outcome = await runner.call(make_request(arguments=UNAME))
    assert outcome.error_code == "WORKER_START_FAILED", outcome.result
    assert "the Docker engine has no runtime 'ghost'" in outcome.result.error.message
    assert labelled_containers(api) == []


def test_the_runsc_message_says_how_to_install_and_register_it():
    message = unknown_runtime("runsc", {"runc": {"path": "runc"}})
    assert "no runtime 'runsc' (it has: runc)" in message
    assert "apt-get install runsc" in message
    assert "scripts/lib/engine.sh's ensure_runsc_runtime" in message
    assert '"runtimeArgs": ["--network=none"]' in message and "daemon.json" in message


async def test_warm_containers_run_under_their_runners_runtime(api):
    require_runtime(api, "runsc")
    async with WarmPool(PoolSettings(size=1)) as pool:
        pooled = {rt: pool.pooled(DockerRunner(BASH_IMAGE, ContainerLimits(runtime=rt)))
                  for rt in ("runc", "runsc")}  # fmt: skip
        assert await pool.filled(timeout_s=120)
        assert pool.idle() == 2  # a shelf per runtime: the limits, runtime included
        for runtime, runner in pooled.items():
            outcome = await runner.call(make_request(arguments=UNAME))
            assert kernel(outcome) == expected_kernel(runtime)
            assert outcome.runner_info["pooled"] is True
            assert outcome.runner_info["runtime"] == runtime


async def test_a_pooled_runner_of_a_missing_runtime_fails_each_call(api):
    async with WarmPool(PoolSettings(size=1, retry_after_s=60)) as pool:
        runner = pool.pooled(DockerRunner(BASH_IMAGE, ContainerLimits(runtime="ghost-2")))
        outcome = await runner.call(make_request(arguments=UNAME))
        assert outcome.error_code == "WORKER_START_FAILED", outcome.result
        assert "no runtime 'ghost-2'" in outcome.result.error.message
        assert pool.idle() == 0


def run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_isolate_runtime_runs_the_call_under_it(api, tmp_path):
    require_runtime(api, "runsc")
    request = tmp_path / "request.json"
    request.write_text(make_request(arguments=UNAME, seconds=120).model_dump_json())
    done = run_cli("isolate", "--runner", "docker", "--image", BASH_IMAGE, "--runtime", "runsc",
                   "--request", str(request), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["result"]["output"]["content"]["stdout"].strip() == "4.4.0"
    assert outcome["runner"]["runtime"] == "runsc"
    assert outcome["runner"]["limits"]["runtime"] == "runsc"


def test_isolate_runtime_the_engine_lacks_is_an_error_result(api, tmp_path):
    request = tmp_path / "request.json"
    request.write_text(make_request(arguments=UNAME, seconds=120).model_dump_json())
    done = run_cli("isolate", "--runner", "docker", "--image", BASH_IMAGE, "--runtime",
                   "ghost-3", "--request", str(request))  # fmt: skip
    assert done.returncode == 1, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "WORKER_START_FAILED" and "ghost-3" in error["message"]


def test_session_run_isolated_runtime_overrides_the_agent_file(api, tmp_path):
    require_runtime(api, "runsc")
    spec = {"tag": "docker", "image": BASH_IMAGE, "runtime": "runc", "timeoutSeconds": 120}
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps({
        "slug": "tiered",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": "k", "name": "bash", "arguments": UNAME}]}, {"text": "done"}]},
        "tools": [{"name": "bash", "kind": "bash", "parameters": SCRIPT}],
        "toolCallPolicyConfig": {"default": {"tag": "runIsolated", "spec": spec,
                                             "attached": False}},
    }))  # fmt: skip
    store = str(tmp_path / "s.db")
    started = run_cli("session", "start", "--agent-file", str(agent), "--prompt", "go",
                      "--step", "--store", store, "--json", cwd=tmp_path)  # fmt: skip
    assert started.returncode == 0, started.stderr
    session_id = json.loads(started.stdout)["session_id"]
    done = run_cli("session", "run-isolated", session_id, "--store", store, "--runtime", "runsc",
                   "--pool-size", "0", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = run_cli("session", "show", session_id, "--store", store, "--json", cwd=tmp_path)
    call = json.loads(shown.stdout)["calls"]["k"]
    assert call["result"]["content"]["stdout"].strip() == "4.4.0", call


@pytest.mark.parametrize(
    "args",
    [("isolate", "--runner", "local", "--runtime", "runsc", "--", "true"),
     ("worker", "--runtime", "run sc"),
     ("session", "run-isolated", "s-1", "--runtime", "a/b")],
    ids=["local-runner", "worker-bad-name", "run-isolated-bad-name"],
)  # fmt: skip
def test_a_runtime_option_that_cannot_apply_is_bad_input(args: tuple[str, ...], tmp_path):
    done = run_cli(*args, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "runtime" in done.stderr and "Traceback" not in done.stderr
