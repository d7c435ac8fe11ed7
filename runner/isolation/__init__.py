"""Isolation: run one request envelope in a fresh worker and return a typed outcome.

`Runner` is the boundary (see base.py). `LocalProcessRunner` runs a trusted worker as a
local process; `DockerRunner` runs an untrusted one in a fresh, hardened container;
`WarmPool` serves DockerRunner calls from containers started ahead, one call each.
Every runner owns what it opened: `await runner.aclose()`, or `async with runner:`.
A runner speaks the v1 envelope unless made with `envelope="agents-exe"` (dialect.py),
for workers written for agents-exe; the protections are the same in both.
`orphans` removes what a dead runner process left behind (workers and containers).
`EgressPolicy` (egress.py): a sandbox's allow-list egress through a proxy of its own.
Envelope 1.1: `capabilities()` (negotiation.py), input files checked against
`FileLimits` before any worker starts, and live output: `call(request, on_event=...)`
delivers each `WorkerEvent` as it arrives (events.py); `stream_call` iterates them.
`AuditedRunner` writes one audit record per call (audit.py: sizes and hashes, never values).
What runners share lives in objects their owner keeps and passes (sharing.py:
`CapabilityCache`, `Sweeper`, `EngineRuntimes`, bundled as `RunnerCaches`), never in
module state; `open_pool` (pooling.py) serves an owner's runners from one warm pool.
Nothing here knows about sessions, policies or stores.
"""

from runner.isolation.audit import (
    AuditedRunner,
    AuditError,
    AuditFailed,
    AuditQuery,
    AuditRecord,
    AuditSink,
    JsonLinesAuditSink,
)
from runner.isolation.base import Runner, RunnerClosed
from runner.isolation.containers import SweepReport, sweep
from runner.isolation.dialect import ENVELOPES, EnvelopeName, UnsupportedExchange
from runner.isolation.docker import ContainerLimits, DockerRunner
from runner.isolation.egress import EgressPolicy
from runner.isolation.events import EventCallback, EventReader, WorkerEvent
from runner.isolation.local import LocalProcessRunner, ProcessLimits
from runner.isolation.negotiation import FileLimits
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
from runner.isolation.pooling import PoolOptions, WarmRunners, open_pool, shelf_size
from runner.isolation.runtimes import EngineRuntimes
from runner.isolation.sharing import CapabilityCache, RunnerCaches, Sweeper, SweepFailed
from runner.isolation.streaming import StreamItem, stream_call

__all__ = [
    "ENVELOPES",
    "OWNER_ENV",
    "AuditError",
    "AuditFailed",
    "AuditQuery",
    "AuditRecord",
    "AuditSink",
    "AuditedRunner",
    "CallOutcome",
    "CapabilityCache",
    "ContainerLimits",
    "DescribeOutcome",
    "DockerRunner",
    "EgressPolicy",
    "EngineRuntimes",
    "EngineUnavailable",
    "EnvelopeName",
    "EventCallback",
    "EventReader",
    "Exchange",
    "FileLimits",
    "JsonLinesAuditSink",
    "LocalProcessRunner",
    "PoolOptions",
    "PoolSettings",
    "PoolState",
    "PoolStateError",
    "PooledRunner",
    "ProcessLimits",
    "Runner",
    "RunnerCaches",
    "RunnerClosed",
    "StreamItem",
    "SweepFailed",
    "SweepReport",
    "Sweeper",
    "UnsupportedExchange",
    "WarmPool",
    "WarmRunners",
    "WorkerEvent",
    "check_engine",
    "open_pool",
    "owner_environment",
    "shelf_size",
    "stream_call",
    "sweep",
    "sweep_containers",
    "sweep_local_workers",
    "sweep_orphans",
]
