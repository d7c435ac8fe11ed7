"""Isolation: run one request envelope in a fresh worker and return a typed outcome.

`Runner` is the boundary (see base.py). `LocalProcessRunner` runs a trusted worker as a
local process; `DockerRunner` runs an untrusted one in a fresh, hardened container.
Nothing here knows about sessions, policies or stores.
"""

from runner.isolation.base import Runner
from runner.isolation.containers import SweepReport, sweep
from runner.isolation.docker import ContainerLimits, DockerRunner
from runner.isolation.local import LocalProcessRunner, ProcessLimits
from runner.isolation.outcome import CallOutcome, DescribeOutcome, Exchange

__all__ = [
    "CallOutcome",
    "ContainerLimits",
    "DescribeOutcome",
    "DockerRunner",
    "Exchange",
    "LocalProcessRunner",
    "ProcessLimits",
    "Runner",
    "SweepReport",
    "sweep",
]
