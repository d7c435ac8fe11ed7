"""The warm pool of the commands that run Docker-isolated calls (`run`, the `session`
commands that advance a session, `worker`, `serve`, `demo`).

How big a shelf is, for one Docker spec: `--pool-size N`, else the environment variable
AGENTS_RUNNER_POOL_SIZE (the same option reads it), else the spec's own `pool` setting in
the agent file, else 0; 0 means each call starts its own container. `--pool-size 0` (or
the variable set to 0) turns pooling off for every spec, whatever the agent file says.
Without an option or variable, a process opens a pool that holds nothing until a spec
asks for one, so an agent file alone can turn it on.

The runtime of a Docker spec's containers (warm or cold): `--runtime NAME` (or
AGENTS_RUNNER_RUNTIME) on `worker`, `serve` and `session run-isolated`, for every spec
whatever the agent file says, else the spec's own `runtime`, else runc. Warm containers
are shelved by limits, runtime included, so a warm call runs under its spec's runtime.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TypeVar

from runner.isolation import DockerRunner, PoolSettings, Runner, WarmPool
from runner.session import DockerSpec, DurableAgent, LocalProcessSpec, runner_for_spec

T = TypeVar("T")


def with_runtime(
    spec: DockerSpec | LocalProcessSpec, runtime: str | None
) -> DockerSpec | LocalProcessSpec:
    """`spec` under the operator's runtime (`--runtime`), when one is given."""
    if runtime is None or not isinstance(spec, DockerSpec):
        return spec
    return spec.model_copy(update={"runtime": runtime})


def pool_size_for(spec: DockerSpec, configured: int | None) -> int:
    """The shelf size for `spec`: the option's (or variable's) value, else the spec's."""
    if configured is not None:
        return configured
    return spec.pool or 0


class PooledRunners:
    """A RunnerFactory serving Docker specs from a warm pool: one DockerRunner per image,
    limits and envelope (the pool owns it and closes it), a fresh handle per call. A spec
    whose size comes out 0, and a local-process spec, get their own runner, as without a
    pool."""

    def __init__(self, pool: WarmPool, configured: int | None, runtime: str | None = None) -> None:
        self.pool = pool
        #: `--pool-size` (or its variable); None: each spec's `pool` decides.
        self.configured = configured
        #: `--runtime` (or its variable); None: each spec's `runtime` decides.
        self.runtime = runtime
        self._docker: dict[str, DockerRunner] = {}

    def __call__(self, spec: DockerSpec | LocalProcessSpec) -> Runner:
        spec = with_runtime(spec, self.runtime)
        runner = runner_for_spec(spec)
        if not isinstance(runner, DockerRunner) or not isinstance(spec, DockerSpec):
            return runner
        size = pool_size_for(spec, self.configured)
        if size == 0:
            return runner
        key = repr((runner.image, runner.command, runner.limits, runner.envelope))
        # An unused DockerRunner holds nothing: its client is made at its first call.
        return self.pool.pooled(self._docker.setdefault(key, runner), size=size)


@asynccontextmanager
async def runner_factory(
    configured: int | None, idle_timeout_s: float | None = None, runtime: str | None = None
) -> AsyncIterator[PooledRunners | None]:
    """A warm pool for the block (None when `configured` is 0 and no `runtime` is forced:
    each call makes its own runner); leaving the block waits for its calls and removes
    every pooled container."""
    if configured == 0 and runtime is None:
        yield None
        return
    settings = PoolSettings(size=configured or 0)
    if idle_timeout_s is not None:
        settings = replace(settings, idle_timeout_s=idle_timeout_s)
    async with WarmPool(settings) as pool:
        yield PooledRunners(pool, configured, runtime)


@asynccontextmanager
async def pooled_agent(
    agent: DurableAgent, configured: int | None, runtime: str | None = None
) -> AsyncIterator[DurableAgent]:
    """`agent` with its Docker-isolated calls served from a warm pool for the block (and
    under `runtime`, when one is forced)."""
    async with runner_factory(configured, runtime=runtime) as pooled:
        yield agent if pooled is None else replace(agent, runner_factory=pooled)


async def with_pool(
    agent: DurableAgent,
    configured: int | None,
    action: Callable[[DurableAgent], Awaitable[T]],
    runtime: str | None = None,
) -> T:
    """`action(agent)` with the agent's Docker-isolated calls from a warm pool."""
    async with pooled_agent(agent, configured, runtime) as pooled:
        return await action(pooled)


__all__ = [
    "PooledRunners",
    "pool_size_for",
    "pooled_agent",
    "runner_factory",
    "with_pool",
    "with_runtime",
]
