"""Isolation: run one request envelope in a fresh worker and return a typed outcome.

`Runner` is the boundary (see base.py). `LocalProcessRunner` runs a trusted worker as a
local process; `DockerRunner` runs an untrusted one in a fresh, hardened container;
`WarmPool` serves DockerRunner calls from containers started ahead, one call each.
Every runner owns what it opened: `await runner.aclose()`, or `async with runner:`.
A runner speaks the v1 envelope unless made with `envelope="agents-exe"` (dialect.py),
for workers written for agents-exe; the protections are the same in both.
`orphans` removes what a dead runner process left behind (workers and containers).
Nothing here knows about sessions, policies or stores.
"""

from runner.isolation.base import Runner, RunnerClosed
from runner.isolation.containers import SweepReport, sweep
from runner.isolation.dialect import ENVELOPES, EnvelopeName, UnsupportedExchange
from runner.isolation.docker import ContainerLimits, DockerRunner
from runner.isolation.local import LocalProcessRunner, ProcessLimits
from runner.isolation.orphans import (
    OWNER_ENV,
    EngineUnavailable,
    check_engine,
    owner_environment,
    sweep_containers,
    sweep_local_workers,
    sweep_orphans,
)
from runner.isolation.outcome import CallOutcome, DescribeOutcome, Exchange
from runner.isolation.pool import PooledRunner, PoolSettings, PoolState, PoolStateError, WarmPool

__all__ = [
    "ENVELOPES",
    "OWNER_ENV",
    "CallOutcome",
    "ContainerLimits",
    "DescribeOutcome",
    "DockerRunner",
    "EngineUnavailable",
    "EnvelopeName",
    "Exchange",
    "LocalProcessRunner",
    "PoolSettings",
    "PoolState",
    "PoolStateError",
    "PooledRunner",
    "ProcessLimits",
    "Runner",
    "RunnerClosed",
    "SweepReport",
    "UnsupportedExchange",
    "WarmPool",
    "check_engine",
    "owner_environment",
    "sweep",
    "sweep_containers",
    "sweep_local_workers",
    "sweep_orphans",
]
