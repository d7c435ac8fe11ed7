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

The options are parsed here (runner/cli/common.py); the pool itself is the library's
(runner.isolation.open_pool) and the spec adapter the session side's
(runner.session.runners: `runner_factory`, `PooledRunners`), given to the command's
Engine (runner/cli/common.py: `run_engine`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from runner.session.runners import runner_factory
from runner.session.runtime import RunnerFactory

T = TypeVar("T")


async def with_pool(
    configured: int | None,
    action: Callable[[RunnerFactory | None], Awaitable[T]],
    runtime: str | None = None,
) -> T:
    """`action(runners)`: the runners of Docker-isolated calls from a warm pool of
    `configured` (None when there is none to open: each call makes its own runner),
    under `runtime` when one is forced; the pool's containers removed before this returns."""
    async with runner_factory(configured, runtime=runtime) as pooled:
        return await action(pooled)


__all__ = ["with_pool"]
