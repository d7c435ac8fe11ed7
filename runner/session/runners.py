"""The runners a session's isolated calls get (a RunnerFactory): the one each spec names
(execute.runner_for_spec), built with the caches their owner shares (runner.isolation's
RunnerCaches: a worker described once, the engine swept once), under the operator's
runtime when one is forced, and from a warm pool when one is open (runner.isolation's
`open_pool`: a docker spec's `pool` is the shelf size it asks for).

`SpecRunners` is a DurableAgent's default factory; `runner_factory` opens a pool for the
commands that run Docker-isolated calls, from the settings they parsed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from runner.isolation import (
    PoolOptions,
    Runner,
    RunnerCaches,
    WarmPool,
    WarmRunners,
    open_pool,
    shelf_size,
)
from runner.session.execute import runner_for_spec
from runner.session.policy import DockerSpec, LocalProcessSpec


def with_runtime(
    spec: DockerSpec | LocalProcessSpec, runtime: str | None
) -> DockerSpec | LocalProcessSpec:
    """`spec` under the operator's runtime (`--runtime`), when one is given."""
    if runtime is None or not isinstance(spec, DockerSpec):
        return spec
    return spec.model_copy(update={"runtime": runtime})


def pool_size_for(spec: DockerSpec, configured: int | None) -> int:
    """The shelf size for `spec`: the operator's value, else the spec's `pool`, else 0."""
    return shelf_size(configured, spec.pool)


class SpecRunners:
    """A RunnerFactory whose runners share one RunnerCaches (made here unless given), and
    run under `runtime` when one is forced (None: each docker spec's own)."""

    def __init__(self, caches: RunnerCaches | None = None, runtime: str | None = None) -> None:
        self.caches = caches or RunnerCaches()
        self.runtime = runtime

    def __call__(self, spec: DockerSpec | LocalProcessSpec) -> Runner:
        return runner_for_spec(with_runtime(spec, self.runtime), self.caches)


class PooledRunners(SpecRunners):
    """SpecRunners served from a warm pool (runner.isolation.WarmRunners): a docker spec
    whose size comes out 0, and a local-process spec, get their own runner."""

    def __init__(
        self,
        pool: WarmPool,
        configured: int | None,
        runtime: str | None = None,
        caches: RunnerCaches | None = None,
    ) -> None:
        self.warm = WarmRunners(pool, configured, caches)
        super().__init__(self.warm.caches, runtime)

    @property
    def pool(self) -> WarmPool:
        return self.warm.pool

    @property
    def configured(self) -> int | None:
        """`--pool-size` (or its variable); None: each spec's `pool` decides."""
        return self.warm.configured

    def __call__(self, spec: DockerSpec | LocalProcessSpec) -> Runner:
        asked = spec.pool if isinstance(spec, DockerSpec) else None
        return self.warm.serve(super().__call__(spec), asked)


@asynccontextmanager
async def runner_factory(
    configured: int | None,
    idle_timeout_s: float | None = None,
    runtime: str | None = None,
    caches: RunnerCaches | None = None,
) -> AsyncIterator[PooledRunners | None]:
    """A warm pool for the block (None when `configured` is 0 and no `runtime` is forced:
    each call makes its own runner); leaving the block waits for its calls and removes
    every pooled container."""
    if configured == 0 and runtime is None:
        yield None
        return
    async with open_pool(PoolOptions(configured, idle_timeout_s), caches) as warm:
        yield PooledRunners(warm.pool, configured, runtime, warm.caches)


__all__ = ["PooledRunners", "SpecRunners", "pool_size_for", "runner_factory", "with_runtime"]
