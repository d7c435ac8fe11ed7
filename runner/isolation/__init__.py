"""Isolation: run one request envelope in a fresh worker and return a typed outcome.

`Runner` is the boundary (see base.py). `LocalProcessRunner` runs a trusted worker as a
local process; `DockerRunner` runs an untrusted one in a fresh, hardened container;
`WarmPool` serves DockerRunner calls from containers started ahead, one call each.
Nothing here knows about sessions, policies or stores.
"""

from runner.isolation.base import Runner
from runner.isolation.containers import SweepReport, sweep
from runner.isolation.docker import ContainerLimits, DockerRunner
from runner.isolation.local import LocalProcessRunner, ProcessLimits
from runner.isolation.outcome import CallOutcome, DescribeOutcome, Exchange
from runner.isolation.pool import PooledRunner, PoolSettings, WarmPool

__all__ = [
    "CallOutcome",
    "ContainerLimits",
    "DescribeOutcome",
    "DockerRunner",
    "Exchange",
    "LocalProcessRunner",
    "PoolSettings",
    "PooledRunner",
    "ProcessLimits",
    "Runner",
    "SweepReport",
    "WarmPool",
    "sweep",
]
