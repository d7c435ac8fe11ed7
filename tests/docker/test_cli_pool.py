"""The warm pool in the commands people run, against the real engine: `run`, `session
run-isolated`, `worker` and `demo` serve their Docker-isolated calls from pooled
containers when `--pool-size`, AGENTS_RUNNER_POOL_SIZE or a docker spec's `pool` says so
(option > variable > spec; 0 turns it off), leave nothing behind when they exit, and
`agents-runner sweep` removes the pool of a worker that was SIGKILLed.

Each call prints the id of the container it ran in (read from inside); the engine's
create events of the command's process (its owner label) say which containers were
started for the pool (role `pool`) and which for one call (role `call`)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from runner.isolation.containers import LABEL_MANAGED, LABEL_OWNER, LABEL_ROLE, owner_token
from tests.conftest import REPO
from tests.docker.conftest import BASH_IMAGE
from tests.server.processes import wait_for

CLI = [sys.executable, "-m", "runner.cli"]
# The container's id, read from inside it: the engine mounts its hostname file from the
# container's own directory.
WHERE = "grep -o 'containers/[0-9a-f]*/hostname' /proc/self/mountinfo | head -1"
SCRIPT = {"type": "object", "properties": {"script": {"type": "string"}}, "required": ["script"]}
POOL_VARIABLES = ("AGENTS_RUNNER_POOL_SIZE", "AGENTS_RUNNER_POOL_IDLE_SECONDS")


def write_agent(path: Path, turns: list[list[str]], *, pool: int | None = None,
                attached: bool = True) -> Path:  # fmt: skip
    """An agent whose model asks, turn after turn, for the bash calls named in `turns`
    (each prints its container's id), then answers."""
    spec: dict[str, Any] = {"tag": "docker", "image": BASH_IMAGE, "timeoutSeconds": 60}
    if pool is not None:
        spec["pool"] = pool
    responses: list[dict[str, Any]] = [
        {"tool_calls": [{"id": c, "name": "bash", "arguments": {"script": WHERE}} for c in turn]}
        for turn in turns
    ]
    path.write_text(json.dumps({
        "slug": "pooled",
        "provider": {"tag": "scripted", "responses": [*responses, {"text": "done"}]},
        "tools": [{"name": "bash", "kind": "bash", "parameters": SCRIPT}],
        "toolCallPolicyConfig": {"default": {"tag": "runIsolated", "spec": spec,
                                             "attached": attached}},
    }))  # fmt: skip
    return path


def environment(**variables: str) -> dict[str, str]:
    """This process's environment without the pool's variables, plus `variables`."""
    env = {k: v for k, v in os.environ.items() if k not in POOL_VARIABLES}
    return {**env, **variables}


def command(cwd: Path, *args: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    """Run `agents-runner ARGS` to its end; (its owner token, its stdout). It must exit 0."""
    process = subprocess.Popen([*CLI, *args], cwd=cwd, env=env or environment(), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    owner = owner_token(process.pid)  # the token its containers carry, read while it runs
    out, err = process.communicate(timeout=300)
    assert owner is not None
    assert process.returncode == 0, err
    return owner, out


def created(api: docker.APIClient, owner: str, since: float) -> dict[str, str]:
    """The containers `owner` created since `since`: id -> role (pool or call)."""
    events = api.events(since=since, until=time.time(), decode=True, filters={
        "type": "container", "event": "create", "label": f"{LABEL_OWNER}={owner}"})  # fmt: skip
    return {e["id"]: e["Actor"]["Attributes"][LABEL_ROLE] for e in events}


def left(api: docker.APIClient, owner: str) -> list[str]:
    labels = [f"{LABEL_MANAGED}=1", f"{LABEL_OWNER}={owner}"]
    return [c["Id"][:12] for c in api.containers(all=True, filters={"label": labels})]


def ran_in(session: dict[str, Any]) -> dict[str, str]:
    """Call id -> the id of the container the call saw itself in."""
    found = {}
    for call_id, call in session["calls"].items():
        assert call["state"] == "completed", call
        match = re.fullmatch(r"containers/([0-9a-f]{64})/hostname\n",
                             call["result"]["content"]["stdout"])  # fmt: skip
        assert match, call["result"]
        found[call_id] = match.group(1)
    return found


def show(cwd: Path, store: str, session_id: str) -> dict[str, Any]:
    _, out = command(cwd, "session", "show", session_id, "--store", store, "--json")
    document: dict[str, Any] = json.loads(out)
    return document


def test_run_with_pool_size_serves_each_docker_call_from_its_warm_pool(api, tmp_path):
    agent = write_agent(tmp_path / "a.json", [["one"], ["two"]])
    store, since = str(tmp_path / "s.db"), time.time()
    owner, out = command(tmp_path, "run", "--agent-file", str(agent), "--prompt", "go",
                         "--store", store, "--pool-size", "1", "--json")  # fmt: skip
    report = json.loads(out)
    assert report["status"] == "completed"
    containers = ran_in(show(tmp_path, store, report["session_id"]))
    roles = created(api, owner, since)
    assert {roles.get(c) for c in containers.values()} == {"pool"}, (containers, roles)
    assert len(set(containers.values())) == 2, "each call had a container of its own"
    assert "call" not in roles.values(), "no call started cold"
    assert left(api, owner) == [], "the pool was emptied before `run` exited"


@pytest.mark.parametrize(
    ("args", "variables"),
    [(("--pool-size", "0"), {"AGENTS_RUNNER_POOL_SIZE": "2"}),  # the option beats both
     ((), {"AGENTS_RUNNER_POOL_SIZE": "0"})],  # the variable beats the spec
    ids=["option-0", "variable-0"],
)  # fmt: skip
def test_zero_turns_the_pool_off_whatever_the_agent_file_says(
    api, tmp_path, args: tuple[str, ...], variables: dict[str, str]
) -> None:
    agent = write_agent(tmp_path / "a.json", [["one"]], pool=2)
    store, since = str(tmp_path / "s.db"), time.time()
    owner, out = command(tmp_path, "run", "--agent-file", str(agent), "--prompt", "go", "--store",
                         store, *args, "--json", env=environment(**variables))  # fmt: skip
    containers = ran_in(show(tmp_path, store, json.loads(out)["session_id"]))
    roles = created(api, owner, since)
    assert set(roles.values()) == {"call"}, roles
    assert roles[containers["one"]] == "call"
    assert left(api, owner) == []


def test_a_docker_spec_pool_setting_alone_turns_the_pool_on(api, tmp_path):
    agent = write_agent(tmp_path / "a.json", [["one"], ["two"]], pool=1)
    store, since = str(tmp_path / "s.db"), time.time()
    owner, out = command(tmp_path, "run", "--agent-file", str(agent), "--prompt", "go",
                         "--store", store, "--json")  # fmt: skip
    containers = ran_in(show(tmp_path, store, json.loads(out)["session_id"]))
    roles = created(api, owner, since)
    assert {roles.get(c) for c in containers.values()} == {"pool"}, (containers, roles)
    assert left(api, owner) == []


def test_session_run_isolated_reads_the_pool_size_from_the_environment(api, tmp_path):
    agent = write_agent(tmp_path / "a.json", [["one", "two"]], attached=False)
    store = str(tmp_path / "s.db")
    _, out = command(tmp_path, "session", "start", "--agent-file", str(agent), "--prompt", "go",
                     "--step", "--store", store, "--json")  # fmt: skip
    session_id = json.loads(out)["session_id"]
    pending = show(tmp_path, store, session_id)
    assert pending["status"] == "waiting", "the detached calls wait for run-isolated"
    assert {c["attempts"] for c in pending["calls"].values()} == {0}, pending["calls"]
    since = time.time()
    owner, _ = command(tmp_path, "session", "run-isolated", session_id, "--store", store,
                       "--json", env=environment(AGENTS_RUNNER_POOL_SIZE="2"))  # fmt: skip
    containers = ran_in(show(tmp_path, store, session_id))
    roles = created(api, owner, since)
    assert {roles.get(c) for c in containers.values()} == {"pool"}, (containers, roles)
    assert len(set(containers.values())) == 2
    assert left(api, owner) == []


def test_agents_runner_sweep_removes_the_pool_of_a_sigkilled_worker(api, tmp_path):
    agent = write_agent(tmp_path / "a.json", [["one"]])
    store = str(tmp_path / "s.db")
    _, out = command(tmp_path, "session", "start", "--agent-file", str(agent), "--prompt", "go",
                     "--store", store, "--json")  # fmt: skip
    session_id = json.loads(out)["session_id"]
    log = tmp_path / "worker.log"
    with log.open("wb") as stderr:
        worker = subprocess.Popen(
            [*CLI, "worker", "--store", store, "--pool-size", "2", "--poll-seconds", "0.05"],
            cwd=tmp_path, env=environment(), stdout=stderr, stderr=stderr,
        )  # fmt: skip
    try:
        owner = owner_token(worker.pid)
        assert owner is not None

        def idle_pool() -> set[str]:
            labels = [f"{LABEL_MANAGED}=1", f"{LABEL_OWNER}={owner}", f"{LABEL_ROLE}=pool"]
            found = api.containers(filters={"label": labels, "status": "running"})
            return {c["Id"] for c in found}

        wait_for(lambda: show(tmp_path, store, session_id)["status"] == "completed",
                 what="the worker completing the session")  # fmt: skip
        used = set(ran_in(show(tmp_path, store, session_id)).values())
        wait_for(lambda: len(idle_pool() - used) == 2, what="the shelf refilled to 2")
        pooled = idle_pool() - used
    finally:
        worker.send_signal(signal.SIGKILL)  # no drain: the pool is left to the sweeper
        worker.wait()
    assert {c[:12] for c in pooled} <= set(left(api, owner)), "the dead worker's pool remains"
    swept = subprocess.run([*CLI, "sweep"], cwd=tmp_path, env=environment(),
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert swept.returncode == 0, swept.stderr
    assert all(f"removed {c[:12]}" in swept.stdout for c in pooled), swept.stdout
    assert left(api, owner) == []


def test_the_demo_with_pool_size_runs_its_bash_call_in_a_warm_container(api, tmp_path):
    env = environment(AGENTS_RUNNER_LOG_LEVEL="DEBUG")
    done = subprocess.run(
        [*CLI, "demo", "--runner", "docker", "--pool-size", "1", "--json",
         "--store", str(tmp_path / "demo.db")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)
    assert trace["runner"] == "docker" and trace["pool_size"] == 1
    assert "- bash: " in trace["final_answer"]
    # The step's log, passed on: which containers the pool started, and where bash ran.
    started = set(re.findall(r"started container ([0-9a-f]{12}) \(role pool\)", done.stderr))
    served = re.findall(r"call \S+: container ([0-9a-f]{12}) \((warm|cold)\)", done.stderr)
    assert served, done.stderr
    assert all(how == "warm" and container in started for container, how in served), served
    for container in started:  # nothing of the pool outlives the steps
        with pytest.raises(docker.errors.NotFound):
            api.inspect_container(container)
