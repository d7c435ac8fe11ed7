"""The store interfaces: sessions (with the agent definitions they run), continuations and
the tool cache. Backends: sqlite.py (the embedded default), files.py (sessions as JSON
files), composite.py (reads fall through, writes go to the primary).

Every write that advances a session is a compare-and-set on its version: `save(session)`
succeeds only if the stored version is still `session.version`, and returns the session
with the new version; otherwise it raises VersionConflict and changes nothing.

A store that also implements LeaseStore fences those writes: `save(session, fences)`
refuses (FencedOut, zero rows changed) when any fence's token is no longer the newest
for its lease. An EffectLedger records every isolated call before and after it runs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

from runner.session.models import Session, ToolResult


class StoreError(Exception):
    """The store cannot do what was asked; the message says why."""


class SessionNotFound(StoreError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r} in this store")
        self.session_id = session_id


class VersionConflict(StoreError):
    """A write based on a stale read: someone else advanced the session first."""

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"session {session_id} changed underneath this write (read version {expected},"
            f" stored version {actual}); load it again and retry"
        )
        self.session_id = session_id
        self.expected = expected
        self.actual = actual


class FencedOut(StoreError):
    """A commit carrying a fencing token that a newer lease holder has superseded."""

    def __init__(self, name: str, token: int, newest: int | None) -> None:
        super().__init__(
            f"lease {name!r}: fencing token {token} is stale (newest {newest}); another"
            " holder took over, this commit changed nothing"
        )
        self.name, self.token, self.newest = name, token, newest


@dataclass(frozen=True)
class Lease:
    """The right to advance one thing (a session) until `expires_ms` (database time).
    `fencing_token` only grows; `takeovers` counts holders that died in a row."""

    name: str
    owner: str
    fencing_token: int
    expires_ms: int
    takeovers: int = 0


@dataclass(frozen=True)
class Effect:
    """An effect-ledger row: one isolated call's latest attempt and what became of it.
    state: requested (before the worker starts), started (handed to the runner),
    completed (`result` is the ToolCallResult envelope), abandoned (an operator said so)."""

    idempotency_key: str
    session_id: str
    call_id: str
    attempt: int
    effects: str
    state: str
    result: str | None


@dataclass(frozen=True)
class SessionSummary:
    id: str
    status: str
    agent_slug: str
    version: int
    updated_ms: int


@dataclass(frozen=True)
class Continuation:
    """Where a continuation token leads."""

    token: str
    session_id: str
    call_id: str


class SessionStore(Protocol):
    def create(self, session: Session, agent_document: dict[str, Any]) -> Session:
        """Store a new session and the agent definition it runs. A new session gets
        version 1; one copied from another store keeps its version."""
        ...

    def load(self, session_id: str) -> Session: ...

    def save(self, session: Session, fences: tuple[Lease, ...] = ()) -> Session:
        """Compare-and-set on `session.version`; returns the session as stored."""
        ...

    def agent_document(self, agent_hash: str) -> dict[str, Any]: ...

    def list(self, status: str | None = None) -> list[SessionSummary]: ...


class LeaseStore(Protocol):
    def acquire_lease(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        """A new lease with a newer token, or None while a live holder has it."""
        ...

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        """Extend a lease still held; FencedOut when someone took it over."""
        ...

    def release_lease(self, lease: Lease) -> None: ...


class EffectLedger(Protocol):
    def effect(self, idempotency_key: str) -> Effect | None: ...

    def record_effect(self, effect: Effect, fences: tuple[Lease, ...] = ()) -> None:
        """Upsert the row; refused (FencedOut, nothing written) under a stale fence."""
        ...


class ContinuationStore(Protocol):
    def find(self, token: str) -> Continuation | None: ...


class ToolCache(Protocol):
    def get(self, tool: str, arguments: dict[str, Any]) -> ToolResult | None: ...

    def put(
        self, tool: str, arguments: dict[str, Any], result: ToolResult, ttl_s: float | None
    ) -> None: ...


def cache_key(tool: str, arguments: dict[str, Any]) -> str:
    """Tool name plus a hash of the canonical arguments (sorted keys, compact, UTF-8)."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{tool}:{hashlib.sha256(canonical.encode()).hexdigest()}"
