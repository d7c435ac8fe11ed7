"""The Runner protocol: the one boundary between the session engine and isolation.

A runner receives a validated ToolCallRequest and returns a CallOutcome, always: whatever
the worker does (crash, hang, flood, lie), the answer is a typed outcome whose result
envelope carries the runner's own code. It raises only for the caller's own faults
(cancellation of the calling task propagates after the worker is cleaned up).
A runner knows nothing of sessions, policies or stores.

Runners are built on `exchange()`: write one payload to a fresh worker, read what comes
back under caps and a deadline, clean up. `call()` and `describe()` are shared on top,
in the runner's `dialect` (the envelope its workers speak: v1 unless it was made with
another, see dialect.py); the protections are the same whatever the dialect.

A runner owns what it opened (a Docker client, say) and releases it in `aclose()`, which
`async with runner:` calls on the way out; a runner that holds nothing closes trivially.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from envelopes import codec
from envelopes.v1 import MAX_REQUEST_BYTES, DescribeRequest, ToolCallRequest
from runner.isolation.dialect import V1_DIALECT, Dialect, UnsupportedExchange
from runner.isolation.outcome import (
    CallOutcome,
    DescribeOutcome,
    Exchange,
    call_outcome,
    refused_outcome,
)
from runner.isolation.outcome import describe_outcome as _describe_outcome
from runner.lifecycle import AsyncClosing

#: Cap on a DescribeResult document.
DESCRIBE_MAX_BYTES = 1024 * 1024


@runtime_checkable
class Runner(Protocol):
    """Runs one ToolCallRequest in a fresh worker and returns its typed outcome."""

    async def call(self, request: ToolCallRequest) -> CallOutcome: ...

    async def describe(self, timeout_s: float = 30.0) -> DescribeOutcome: ...

    async def aclose(self) -> None:
        """Release what the runner owns (clients it created, never ones it was given).
        Idempotent; calls already under way are not interrupted, and a runner that holds
        resources refuses new calls afterwards (RunnerClosed)."""
        ...

    async def __aenter__(self) -> Self:
        """`async with runner:` returns the runner itself..."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """...and closes it on the way out (`aclose`)."""
        ...


class RunnerClosed(RuntimeError):
    """A call was made on a runner (or pool) after it was closed: the caller's fault."""


class ExchangeRunner(AsyncClosing):
    """Shared `call`/`describe` for runners that implement `exchange`, and `async with`
    support on top of `aclose` (which holds nothing by default)."""

    async def aclose(self) -> None:
        """Release what this runner owns; nothing, unless a subclass says otherwise."""
        return

    @property
    def dialect(self) -> Dialect:
        """The envelope this runner's workers speak: v1, unless made for another."""
        return V1_DIALECT

    @abstractmethod
    async def exchange(
        self, payload: bytes, deadline_ms: int, stdout_cap: int, call_label: str
    ) -> Exchange:
        """Start a fresh worker, write `payload` to its stdin and close it, read stdout
        (at most `stdout_cap` bytes) and stderr until the worker ends or `deadline_ms`
        (epoch ms) passes, and leave nothing behind. `call_label` names the call in
        logs and labels."""

    async def call(self, request: ToolCallRequest) -> CallOutcome:
        dialect = self.dialect
        try:
            payload = dialect.encode(request)
        except ValueError as exc:
            return refused_outcome(
                request,
                "INVALID_REQUEST",
                f"the request has no {dialect.name} envelope: {exc}; no worker was started",
            )
        if len(payload) > MAX_REQUEST_BYTES:  # no worker may be asked to read past its cap
            return refused_outcome(
                request,
                "INVALID_REQUEST",
                f"the request is {len(payload)} bytes, over the cap of {MAX_REQUEST_BYTES};"
                " no worker was started",
            )
        exchanged = await self.exchange(
            payload, request.deadline_ms, request.limits.max_result_bytes, request.id
        )
        if dialect is not V1_DIALECT:
            exchanged.runner_info["envelope"] = dialect.name
        return call_outcome(request, exchanged, dialect)

    async def describe(self, timeout_s: float = 30.0) -> DescribeOutcome:
        """The worker's DescribeResult; UnsupportedExchange for a dialect without one."""
        if not self.dialect.describes:
            raise UnsupportedExchange(
                f"workers speaking the {self.dialect.name} envelope have no describe exchange"
            )
        deadline_ms = int((time.time() + timeout_s) * 1000)
        exchanged = await self.exchange(
            codec.encode(DescribeRequest()), deadline_ms, DESCRIBE_MAX_BYTES, "describe"
        )
        return _describe_outcome(exchanged, DESCRIBE_MAX_BYTES)


def seconds_until(deadline_ms: int) -> float:
    """Seconds left before an absolute epoch-ms deadline (negative when past)."""
    return deadline_ms / 1000.0 - time.time()
