"""The warm pool as an owner of many runners uses it (the commands' workers, `serve`,
`run`): one pool for a block, the shelf size of each runner from the operator's choice or
the runner's own, and the caches the owner's runners share (sharing.py).

How big a shelf is: the operator's size when one was given (`PoolOptions.size`; 0 turns
pooling off for every runner), else the size asked with the runner (an agent file's
docker spec says it: the session side passes it), else 0; 0 means each call starts its
own container. The settings are explicit: this module reads no environment (the command
line does, and passes what it parsed).

    async with open_pool(PoolOptions(size=None)) as warm:
        runner = warm.serve(DockerRunner(image, capability_cache=warm.caches.capabilities),
                            asked=2)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from runner.isolation.base import Runner
from runner.isolation.docker import DockerRunner
from runner.isolation.pool import PoolSettings, WarmPool
from runner.isolation.sharing import RunnerCaches


@dataclass(frozen=True)
class PoolOptions:
    """What the operator chose (`--pool-size`, `--pool-idle-seconds`)."""

    #: Idle containers per shelf for every runner; None: each runner's own (`asked`);
    #: 0: no pooling at all.
    size: int | None = None
    #: A shelf unused this long gives its idle containers back; None: PoolSettings'.
    idle_timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.size is not None and self.size < 0:
            raise ValueError(f"PoolOptions.size must be 0 or more, got {self.size}")

    def settings(self) -> PoolSettings:
        if self.idle_timeout_s is None:
            return PoolSettings(size=self.size or 0)
        return PoolSettings(size=self.size or 0, idle_timeout_s=self.idle_timeout_s)


def shelf_size(configured: int | None, asked: int | None) -> int:
    """The shelf size of a runner: the operator's (`configured`), else its own, else 0."""
    if configured is not None:
        return configured
    return asked or 0


class WarmRunners:
    """Runners served from one warm pool: one DockerRunner per image, command, limits
    and envelope (the pool owns it and closes it), a fresh handle per call. A runner
    whose shelf size comes out 0, and a local process (nothing to warm), are returned
    as they are. `caches` is what the owner's runners share."""

    def __init__(
        self, pool: WarmPool, configured: int | None, caches: RunnerCaches | None = None
    ) -> None:
        self.pool = pool
        #: The operator's size; None: each runner's `asked` decides.
        self.configured = configured
        self.caches = caches or RunnerCaches()
        #: Bounded by the pool's shelves: one runner per shelf key.
        self._docker: dict[str, DockerRunner] = {}

    def serve(self, runner: Runner, asked: int | None = None) -> Runner:
        """`runner` from the pool when its shelf size (`shelf_size`) is above 0."""
        if not isinstance(runner, DockerRunner):
            return runner
        size = shelf_size(self.configured, asked)
        if size == 0:
            return runner
        key = repr((runner.image, runner.command, runner.limits, runner.envelope))
        # An unused DockerRunner holds nothing: its client is made at its first call.
        return self.pool.pooled(self._docker.setdefault(key, runner), size=size)


@asynccontextmanager
async def open_pool(
    options: PoolOptions, caches: RunnerCaches | None = None
) -> AsyncIterator[WarmRunners]:
    """A warm pool for the block; leaving it waits for its calls and removes every
    pooled container."""
    async with WarmPool(options.settings()) as pool:
        yield WarmRunners(pool, options.size, caches)


__all__ = ["PoolOptions", "WarmRunners", "open_pool", "shelf_size"]
