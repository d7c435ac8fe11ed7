"""How the commands size their warm pool (runner/session/runners.py, over
runner.isolation.open_pool), without an engine:
option or variable > the docker spec's `pool` > 0, a spec that comes out 0 or a local
process left unpooled, and bad values refused with the option's or the field's name.
tests/docker/test_cli_pool.py proves the calls then run in pooled containers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from runner.isolation import DockerRunner, LocalProcessRunner, WarmPool
from runner.session import AgentError, DockerSpec, LocalProcessSpec, parse_agent
from runner.session.runners import PooledRunners, pool_size_for, runner_factory

IMAGE = "agents-runner/bash-runner:latest"


@pytest.mark.parametrize(
    ("configured", "pool", "size"),
    [(None, None, 0), (None, 3, 3), (2, None, 2), (2, 5, 2), (0, 3, 0), (None, 0, 0)],
)
def test_the_option_or_variable_wins_over_the_spec_and_nothing_set_means_no_pool(
    configured: int | None, pool: int | None, size: int
) -> None:
    spec = DockerSpec(image=IMAGE, pool=pool)
    assert pool_size_for(spec, configured) == size


def test_a_spec_sized_0_and_a_local_process_get_their_own_runner() -> None:
    async def main() -> None:
        async with WarmPool() as pool:
            runners = PooledRunners(pool, None)
            assert type(runners(DockerSpec(image=IMAGE))) is DockerRunner
            assert type(runners(DockerSpec(image=IMAGE, pool=0))) is DockerRunner
            local = runners(LocalProcessSpec(argv=["true"]))
            assert isinstance(local, LocalProcessRunner)
            # A shelf of size 0 exists only once asked for; none was: nothing started.
            assert pool.idle() == 0 and pool.starting() == 0

    anyio.run(main)


def test_a_pool_sized_0_is_no_pool_at_all() -> None:
    async def main() -> None:
        async with runner_factory(0) as pooled:
            assert pooled is None
        async with runner_factory(None, idle_timeout_s=5) as pooled:
            assert pooled is not None and pooled.pool.settings.idle_timeout_s == 5

    anyio.run(main)


def test_a_pool_setting_out_of_range_is_refused_with_its_path() -> None:
    document = {
        "slug": "bad-pool",
        "provider": {"tag": "scripted", "responses": [{"text": "hi"}]},
        "toolCallPolicyConfig": {"default": {"tag": "runIsolated", "spec": {
            "tag": "docker", "image": IMAGE, "pool": 65}}},
    }  # fmt: skip
    with pytest.raises(AgentError, match=r"toolCallPolicyConfig\.default\.spec\.pool"):
        parse_agent(document, "agent.json")


@pytest.mark.parametrize(
    ("args", "variable", "message"),
    [(["--pool-size", "65"], None, "'--pool-size'"),
     ([], "many", "(env var: 'AGENTS_RUNNER_POOL_SIZE')"),
     ([], "-1", "(env var: 'AGENTS_RUNNER_POOL_SIZE')")],
)  # fmt: skip
def test_a_bad_pool_size_is_a_usage_error_naming_where_it_came_from(
    tmp_path: Path, args: list[str], variable: str | None, message: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTS_RUNNER_POOL_SIZE"}
    env["COLUMNS"] = "400"  # typer's error box on one line
    if variable is not None:
        env["AGENTS_RUNNER_POOL_SIZE"] = variable
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", "run", "--prompt", "hi", "--store",
         str(tmp_path / "s.db"), *args], env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert message in " ".join(done.stderr.split()), done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "s.db").exists(), "refused before the store was opened"
