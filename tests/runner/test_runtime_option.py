"""`--runtime` (or AGENTS_RUNNER_RUNTIME) on the commands that advance sessions, without an
engine: it replaces every docker spec's runtime, pooled or not, leaves local processes as
they are, and keeps a factory even with the pool off. tests/docker/test_runtime_tier.py
runs a call under it."""

from __future__ import annotations

import anyio

from runner.isolation import DockerRunner, LocalProcessRunner
from runner.session import DockerSpec, LocalProcessSpec
from runner.session.runners import runner_factory, with_runtime

IMAGE = "agents-runner/bash-runner:latest"


def test_the_forced_runtime_replaces_the_specs_own():
    spec = DockerSpec(image=IMAGE, runtime="runc")
    assert with_runtime(spec, "runsc").runtime == "runsc"  # type: ignore[union-attr]
    assert with_runtime(spec, None) is spec
    local = LocalProcessSpec(argv=["true"])
    assert with_runtime(local, "runsc") is local


def test_a_forced_runtime_applies_with_the_pool_off_too():
    async def main() -> None:
        async with runner_factory(0, runtime="runsc") as factory:
            assert factory is not None
            runner = factory(DockerSpec(image=IMAGE))
            assert isinstance(runner, DockerRunner) and runner.limits.runtime == "runsc"
            assert isinstance(factory(LocalProcessSpec(argv=["true"])), LocalProcessRunner)
            assert factory.pool.idle() == 0 and factory.pool.starting() == 0
        async with runner_factory(0) as factory:
            assert factory is None  # no runtime forced, no pool: the agent's own factory

    anyio.run(main)
