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

Envelope 1.1 (negotiation.py): a runner asks its worker's capabilities once (describe
at 1.1, else 1.0; `capabilities()`), checks input files before any worker starts, and
sends 1.1 fields only to a worker that declares them. With `events` in the request, the
worker's stderr is read by an EventReader (events.py) and each event reaches `on_event`
as soon as its line is complete.

A runner owns what it opened (a Docker client, say) and releases it in `aclose()`, which
`async with runner:` calls on the way out; a runner that holds nothing closes trivially.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from collections.abc import Hashable
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from envelopes import codec
from envelopes.rules import EVENTS_MAX_BYTES_CEILING, LATEST_VERSION, VERSION
from envelopes.v1 import MAX_REQUEST_BYTES, DescribeRequest, ToolCallRequest
from runner.isolation.dialect import V1_DIALECT, Dialect, UnsupportedExchange
from runner.isolation.events import EventCallback, EventReader
from runner.isolation.negotiation import (
    FileLimits,
    Refused,
    capabilities_of,
    input_files_problem,
    needs_capabilities,
    plan,
)
from runner.isolation.outcome import (
    CallOutcome,
    DescribeOutcome,
    Exchange,
    call_outcome,
    refused_outcome,
)
from runner.isolation.outcome import describe_outcome as _describe_outcome
from runner.isolation.sharing import CapabilityCache
from runner.lifecycle import AsyncClosing

logger = logging.getLogger(__name__)

#: Cap on a DescribeResult document.
DESCRIBE_MAX_BYTES = 1024 * 1024
#: Longest a describe made to learn capabilities may take (less when the call's deadline
#: is nearer).
CAPABILITIES_TIMEOUT_S = 30.0
#: The key of a runner's own worker in its own CapabilityCache (no `capability_key`).
_THIS_RUNNER = ("this runner",)


@runtime_checkable
class Runner(Protocol):
    """Runs one ToolCallRequest in a fresh worker and returns its typed outcome."""

    async def call(
        self, request: ToolCallRequest, on_event: EventCallback | None = None
    ) -> CallOutcome:
        """`on_event` receives the worker's live output (1.1 `events`), on the event loop,
        as each event arrives; it must not block. Without it (and without `events` in the
        request) the call is exactly a 1.0 call."""
        ...

    async def describe(self, timeout_s: float = 30.0) -> DescribeOutcome: ...

    async def capabilities(self) -> frozenset[str]:
        """What the worker declares (`files`, `events`), asked once and cached."""
        ...

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
    """Shared `call`/`describe`/`capabilities` for runners that implement `exchange`, and
    `async with` support on top of `aclose` (which holds nothing by default)."""

    #: Capabilities given to the runner's constructor: its worker is never asked.
    declared_capabilities: frozenset[str] | None = None
    #: Caps on the input files a call may carry (checked before any worker starts).
    file_limits: FileLimits = FileLimits()
    #: Where describe's answers are kept, shared by the runners of one owner (sharing.py);
    #: None: the runner keeps its own (`known_capabilities()`).
    capability_cache: CapabilityCache | None = None

    async def aclose(self) -> None:
        """Release what this runner owns; nothing, unless a subclass says otherwise."""
        return

    @property
    def dialect(self) -> Dialect:
        """The envelope this runner's workers speak: v1, unless made for another."""
        return V1_DIALECT

    @property
    def events_max_bytes(self) -> int:
        """The largest `events.max_bytes` this runner sends: half its standard error cap
        (section 11.5), so that a worker keeping to its event budget never reaches the
        cap (`OUTPUT_TOO_LARGE`) with event lines alone."""
        cap = getattr(getattr(self, "limits", None), "max_stderr_bytes", None)
        return EVENTS_MAX_BYTES_CEILING if not isinstance(cap, int) else max(1, cap // 2)

    @abstractmethod
    async def exchange(
        self,
        payload: bytes,
        deadline_ms: int,
        stdout_cap: int,
        call_label: str,
        *,
        events: EventReader | None = None,
    ) -> Exchange:
        """Start a fresh worker, write `payload` to its stdin and close it, read stdout
        (at most `stdout_cap` bytes) and stderr until the worker ends or `deadline_ms`
        (epoch ms) passes, and leave nothing behind. `call_label` names the call in
        logs and labels. With `events`, stderr is fed to it as it arrives (its plain
        bytes are the stderr tail; all of stderr counts against the stderr cap)."""

    async def call(
        self, request: ToolCallRequest, on_event: EventCallback | None = None
    ) -> CallOutcome:
        problem = input_files_problem(request, self.file_limits)
        if problem is not None:
            return refused_outcome(request, "INVALID_REQUEST", f"{problem}; no worker was started")
        sent = request
        if needs_capabilities(request, on_event):
            timeout_s = min(CAPABILITIES_TIMEOUT_S, seconds_until(request.deadline_ms))
            capabilities, why = await self._learn_capabilities(timeout_s)
            try:
                sent = plan(request, capabilities, on_event, self.events_max_bytes)
            except Refused as exc:
                return refused_outcome(
                    request, "INVALID_REQUEST", f"{exc}{why}; no worker was started"
                )
        dialect = self.dialect
        try:
            payload = dialect.encode(sent)
        except ValueError as exc:
            return refused_outcome(
                sent,
                "INVALID_REQUEST",
                f"the request has no {dialect.name} envelope: {exc}; no worker was started",
            )
        if len(payload) > MAX_REQUEST_BYTES:  # no worker may be asked to read past its cap
            return refused_outcome(
                sent,
                "INVALID_REQUEST",
                f"the request is {len(payload)} bytes, over the cap of {MAX_REQUEST_BYTES};"
                " no worker was started",
            )
        reader = None if sent.events is None else EventReader(sent.id, sent.events, on_event)
        try:
            exchanged = await self.exchange(
                payload, sent.deadline_ms, sent.limits.max_result_bytes, sent.id, events=reader
            )
        finally:
            if reader is not None:
                reader.finish()
                reader.close()  # a stream thread still running delivers nothing more
        if dialect is not V1_DIALECT:
            exchanged.runner_info["envelope"] = dialect.name
        return call_outcome(sent, exchanged, dialect, reader)

    async def describe(self, timeout_s: float = 30.0, version: str = VERSION) -> DescribeOutcome:
        """The worker's DescribeResult; UnsupportedExchange for a dialect without one.
        `version` is the DescribeRequest's (1.1 asks for capabilities)."""
        if not self.dialect.describes:
            raise UnsupportedExchange(
                f"workers speaking the {self.dialect.name} envelope have no describe exchange"
            )
        deadline_ms = int((time.time() + timeout_s) * 1000)
        exchanged = await self.exchange(
            codec.encode(DescribeRequest(version=version)),
            deadline_ms,
            DESCRIBE_MAX_BYTES,
            "describe",
        )
        return _describe_outcome(exchanged, DESCRIBE_MAX_BYTES)

    async def capabilities(self) -> frozenset[str]:
        """What the worker declares (`files`, `events`): the runner's
        `declared_capabilities` when it was given some, else its DescribeResult at 1.1
        (at 1.0, with no capabilities, for a worker that refuses 1.1), asked once and
        kept in `known_capabilities()` (by `capability_key()` where the runner has one,
        so the runners sharing that cache ask once between them). None for a dialect
        without describe; none, not kept, when describe fails."""
        found, _ = await self._learn_capabilities(CAPABILITIES_TIMEOUT_S)
        return found

    async def capability_key(self) -> Hashable | None:
        """A key shared by the runners of one worker, so that they describe it once
        between them; None (the default): each runner asks for itself."""
        return None

    def known_capabilities(self) -> CapabilityCache:
        """The cache describe's answers go to: the one given (`capability_cache`), else
        the runner's own, made at its first use."""
        if self.capability_cache is not None:
            return self.capability_cache
        return self._own_cache()

    def _own_cache(self) -> CapabilityCache:
        own: CapabilityCache | None = self.__dict__.get("_own_capability_cache")
        if own is None:
            own = CapabilityCache()
            object.__setattr__(self, "_own_capability_cache", own)  # frozen dataclasses too
        return own

    async def _learn_capabilities(self, timeout_s: float) -> tuple[frozenset[str], str]:
        """The capabilities, and why there are none when describe failed (`" (...)"`)."""
        if self.declared_capabilities is not None:
            return self.declared_capabilities, ""
        if not self.dialect.describes:
            return frozenset(), f" (workers speaking {self.dialect.name} declare none)"
        key = await self.capability_key()
        # Keyless: this runner's worker, in this runner's own cache.
        memo = self.known_capabilities() if key is not None else self._own_cache()
        key = _THIS_RUNNER if key is None else key
        cached = memo.get(key)
        if cached is not None:
            return cached, ""
        async with memo.describing(key):
            cached = memo.get(key)
            if cached is not None:  # learnt while this call waited
                return cached, ""
            return await self._describe_for_capabilities(memo, key, timeout_s)

    async def _describe_for_capabilities(
        self, memo: CapabilityCache, key: Hashable, timeout_s: float
    ) -> tuple[frozenset[str], str]:
        if timeout_s <= 0:
            return frozenset(), " (the call's deadline left no time to describe the worker)"
        problem = ""
        for version in (LATEST_VERSION, VERSION):
            outcome = await self.describe(timeout_s, version)
            if outcome.describe is not None:
                found = capabilities_of(outcome.describe)
                memo.put(key, found)
                logger.debug("worker capabilities (describe at %s): %s", version,
                             ", ".join(sorted(found)) or "none")  # fmt: skip
                return found, ""
            problem = f"{outcome.error_code}: {outcome.message}"
            if outcome.error_code == "WORKER_START_FAILED":  # no worker: asking again won't do
                break
        else:
            if outcome.error_code == "MALFORMED_OUTPUT":  # it answered, badly, twice
                memo.put(key, frozenset())  # asking again on every call would not help
        logger.warning("cannot learn the worker's capabilities (describe at %s, then %s): %s;"
                       " it is taken to have none", LATEST_VERSION, VERSION, problem)  # fmt: skip
        return frozenset(), f" (its describe failed: {problem})"


def seconds_until(deadline_ms: int) -> float:
    """Seconds left before an absolute epoch-ms deadline (negative when past)."""
    return deadline_ms / 1000.0 - time.time()
