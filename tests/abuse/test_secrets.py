"""Host secrets: nothing of the runner's environment, the engine's socket, the host's home
or this repository reaches the container; the worker's own memory is out of the script's
reach."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.abuse.conftest import attack
from tests.conftest import REPO

pytestmark = pytest.mark.anyio
CANARY = "canary-3b9e51"


async def test_the_runners_environment_is_not_visible(api, monkeypatch):
    monkeypatch.setenv("AGENTS_RUNNER_CANARY", CANARY)
    hit = await attack(api, "env; cat /proc/self/environ")
    assert CANARY not in hit.output
    assert "AGENTS_RUNNER_CANARY" not in hit.output


async def test_proc_1_environ_holds_only_the_images_environment(api, monkeypatch):
    monkeypatch.setenv("AGENTS_RUNNER_CANARY", CANARY)
    hit = await attack(api, "tr '\\0' '\\n' < /proc/1/environ")
    names = {line.split("=", 1)[0] for line in hit.content["stdout"].splitlines()}
    assert CANARY not in hit.output
    assert names <= {"PATH", "HOSTNAME", "HOME", "LANG", "PYTHONPATH"}


async def test_no_docker_socket(api):
    # `test -e`, not ls: gVisor's statx refuses coreutils' flags (EINVAL), not the path.
    script = ("for p in /var/run/docker.sock /run/docker.sock /run/containerd; do"
              " test -e $p && echo PRESENT $p || echo absent; done")  # fmt: skip
    hit = await attack(api, script)
    assert hit.content["stdout"].split() == ["absent"] * 3


async def test_the_hosts_home_and_this_repository_are_absent(api, tmp_path):
    (tmp_path / "host-only").write_text(CANARY)
    home_only = sorted(set(p.name for p in Path.home().iterdir()) - {".bashrc", ".profile"})
    paths = [str(REPO / "pyproject.toml"), str(tmp_path / "host-only"),
             *(str(Path.home() / name) for name in home_only)]  # fmt: skip
    hit = await attack(api, "for p in \"$@\"; do test -e \"$p\" && echo \"VISIBLE $p\"; done; true"
                       .replace('"$@"', " ".join(f"'{p}'" for p in paths)))  # fmt: skip
    assert "VISIBLE" not in hit.output
    assert (tmp_path / "host-only").read_text() == CANARY


async def test_the_workers_memory_and_descriptors_are_out_of_reach(api, case_runtime):
    # The worker holds the request and writes the result; the script runs as the same
    # user. The worker makes itself non-dumpable, so /proc/<worker> is closed to it.
    script = ("for f in environ mem fd/1 fd/0; do cat /proc/$PPID/$f > /dev/null 2>&1 &&"
              " echo OPEN $f || echo closed $f; done")  # fmt: skip
    hit = await attack(api, script)
    if case_runtime == "runsc":  # gVisor 2022 keeps only mem and fd/1 closed to the script
        assert hit.content["stdout"].split() == ["OPEN", "environ", "closed", "mem", "closed",
                                                 "fd/1", "OPEN", "fd/0"]  # fmt: skip
        return
    assert hit.content["stdout"].split() == ["closed", "environ", "closed", "mem", "closed",
                                             "fd/1", "closed", "fd/0"]  # fmt: skip
