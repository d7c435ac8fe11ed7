"""The orphan sweep against real processes: a local worker whose owner is gone is killed
with its group and the kill is logged; one whose owner lives is left alone; an engine
that does not answer is logged, never raised or passed over in silence."""

from __future__ import annotations

import logging
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runner.isolation import OWNER_ENV, owner_environment, sweep_local_workers, sweep_orphans
from runner.isolation.containers import my_owner_token

#: An owner token of this boot that no process has: a start time no process can have.
DEAD_OWNER = my_owner_token().rsplit("/", 1)[0] + "/not-a-start-time"


@pytest.fixture
def worker() -> Iterator[Callable[[dict[str, str]], subprocess.Popen]]:
    started: list[subprocess.Popen] = []

    def start(env: dict[str, str]) -> subprocess.Popen:
        process = subprocess.Popen(["sleep", "600"], env={"PATH": os.environ["PATH"], **env},
                                   start_new_session=True)  # fmt: skip
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_owner_environment_names_this_process():
    assert OWNER_ENV == "AGENTS_RUNNER_OWNER"
    assert owner_environment() == {OWNER_ENV: my_owner_token()}


def test_a_worker_whose_owner_is_gone_is_killed_and_logged(worker, caplog):
    orphan = worker({OWNER_ENV: DEAD_OWNER})
    with caplog.at_level(logging.INFO, logger="runner.isolation.orphans"):
        killed = sweep_local_workers()
    assert orphan.pid in killed, "its own session: the group is the worker's pid"
    assert orphan.wait(timeout=30) == -9
    assert f"worker pid {orphan.pid}" in caplog.text and DEAD_OWNER in caplog.text


def test_a_worker_whose_owner_lives_is_left_alone(worker):
    mine = worker(owner_environment())
    assert mine.pid not in sweep_local_workers()
    assert mine.poll() is None, "a live owner's worker keeps running"


def test_a_worker_in_another_pid_namespace_is_never_judged_from_outside():
    """A container's worker names its owner by the container's own pids: seen from the
    host that owner looks gone, so the host's sweep must leave it alone."""
    token = f"{DEAD_OWNER}-{uuid.uuid4().hex}"  # dead, and unique to this test
    inside = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child",
         "env", f"{OWNER_ENV}={token}", "sleep", "600"],
        env={"PATH": os.environ["PATH"]}, start_new_session=True,
    )  # fmt: skip
    try:
        worker = _wait_for_process_with(token, inside)
        assert os.readlink(f"/proc/{worker}/ns/pid") != os.readlink("/proc/self/ns/pid")
        sweep_local_workers()
        assert Path(f"/proc/{worker}").exists(), "the sweep killed a namespaced worker"
    finally:
        inside.kill()
        inside.wait()


def _wait_for_process_with(token: str, parent: subprocess.Popen) -> int:
    """The pid (as this namespace numbers it) of the process whose environment has it."""
    marker = f"{OWNER_ENV}={token}".encode()
    for _ in range(1000):
        assert parent.poll() is None, "unshare could not start the namespaced worker"
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and marker in (proc / "environ").read_bytes():
                    return int(proc.name)
            except OSError:
                continue
        time.sleep(0.01)
    raise AssertionError("the namespaced worker never appeared")


def test_no_engine_is_logged_not_raised(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with caplog.at_level(logging.WARNING, logger="runner.isolation.orphans"):
        sweep_orphans()
    assert "containers not swept" in caplog.text
