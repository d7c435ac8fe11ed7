"""A DurableStore assembled from parts: one object per concern (base.py states each),
and the store's methods, the names callers use, forwarded to them here, once.

A backend builds its parts on one engine and hands them to ComposedStore; a composite
store (composite.py) takes its primary's parts and swaps in its own sessions part. New
code may also use a part directly (`store.parts.leases`). The optional `leased` part is
a backend's one-round-trip LeasedSessions over its own sessions and leases; without it
(a composite's), the store's LeasedSessions are DurableStore's plain calls.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal, overload

from runner.isolation.audit import AuditQuery, AuditRecord
from runner.state import Session, SessionT, SessionTail, ToolResult
from runner.stores.base import (
    AuditLog,
    CallClaims,
    Claim,
    Continuation,
    DurableStore,
    Effect,
    EffectLedger,
    Event,
    EventLog,
    FencedSessions,
    Lease,
    LeasedSession,
    LeasedSessions,
    Leases,
    SessionStore,
    SessionSummary,
    ToolCache,
)


@dataclass(frozen=True)
class StoreParts:
    sessions: FencedSessions
    leases: Leases
    events: EventLog
    ledger: EffectLedger
    call_claims: CallClaims
    cache: ToolCache
    #: The sessions and leases above in one round trip (None: the plain calls).
    leased: LeasedSessions | None = None

    @classmethod
    def of(cls, store: DurableStore) -> StoreParts:
        """The parts of `store`: its own when it is composed; otherwise the store itself
        plays every part (it implements them all)."""
        if isinstance(store, ComposedStore):
            return store.parts
        return cls(store, store, store, store, store, store)


class ForwardsSessions(SessionStore):
    """A SessionStore whose methods are its `sessions` part's."""

    sessions: FencedSessions

    def create(self, session: Session, agent_document: dict[str, Any]) -> Session:
        return self.sessions.create(session, agent_document)

    @overload
    def load(self, session_id: str, *, history: Literal[True] = True) -> Session: ...

    @overload
    def load(self, session_id: str, *, history: bool) -> SessionTail: ...

    def load(self, session_id: str, *, history: bool = True) -> SessionTail:
        return self.sessions.load(session_id, history=history)

    def with_history(self, tail: SessionTail) -> Session:
        return self.sessions.with_history(tail)

    def save(self, session: SessionT, fences: tuple[Lease, ...] = ()) -> SessionT:
        return self.sessions.save(session, fences)

    def put_agent(self, agent_hash: str, agent_document: dict[str, Any]) -> None:
        self.sessions.put_agent(agent_hash, agent_document)

    def agent_document(self, agent_hash: str) -> dict[str, Any]:
        return self.sessions.agent_document(agent_hash)

    def list(self, status: str | None = None) -> list[SessionSummary]:
        return self.sessions.list(status)

    def find(self, token: str) -> Continuation | None:
        return self.sessions.find(token)


class ComposedStore(ForwardsSessions, DurableStore):
    """A DurableStore whose every method is one of its parts'."""

    def __init__(self, parts: StoreParts) -> None:
        self.parts = parts
        self.sessions = parts.sessions

    # --- leases and due work ----------------------------------------------------------

    def acquire_lease(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        return self.parts.leases.acquire_lease(name, owner, ttl_s)

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        return self.parts.leases.renew_lease(lease, ttl_s)

    def release_lease(self, lease: Lease) -> None:
        self.parts.leases.release_lease(lease)

    def lease(self, name: str) -> Lease | None:
        return self.parts.leases.lease(name)

    def now_ms(self) -> int:
        return self.parts.leases.now_ms()

    def due_sessions(self, limit: int, exclude: Collection[str] = ()) -> list[str]:
        return self.parts.leases.due_sessions(limit, exclude)

    def wait_for_due(self, timeout_s: float) -> bool:
        return self.parts.leases.wait_for_due(timeout_s)

    # --- a lease with its load, a save with its release ------------------------------

    def lease_and_load(self, session_id: str, owner: str, ttl_s: float) -> LeasedSession | None:
        if self.parts.leased is None:
            return super().lease_and_load(session_id, owner, ttl_s)
        return self.parts.leased.lease_and_load(session_id, owner, ttl_s)

    def lease_and_load_token(
        self, token: str, owner: str, ttl_s: float
    ) -> LeasedSession | Continuation | None:
        if self.parts.leased is None:
            return super().lease_and_load_token(token, owner, ttl_s)
        return self.parts.leased.lease_and_load_token(token, owner, ttl_s)

    def save_and_release(self, session: SessionT, lease: Lease) -> SessionT:
        if self.parts.leased is None:
            return super().save_and_release(session, lease)
        return self.parts.leased.save_and_release(session, lease)

    # --- the event log ----------------------------------------------------------------

    def events(self, after: int, limit: int = 500, session_id: str | None = None) -> list[Event]:
        return self.parts.events.events(after, limit, session_id)

    def last_event_seq(self) -> int:
        return self.parts.events.last_event_seq()

    def wait_for_events(self, timeout_s: float) -> bool:
        return self.parts.events.wait_for_events(timeout_s)

    # --- the effect ledger and late results -------------------------------------------

    def effect(self, idempotency_key: str) -> Effect | None:
        return self.parts.ledger.effect(idempotency_key)

    def record_effect(self, effect: Effect, fences: tuple[Lease, ...] = ()) -> None:
        self.parts.ledger.record_effect(effect, fences)

    def record_late(self, token: str, session_id: str, call_id: str, result: ToolResult) -> None:
        self.parts.ledger.record_late(token, session_id, call_id, result)

    def late_results(self, session_id: str) -> list[tuple[str, ToolResult]]:
        return self.parts.ledger.late_results(session_id)

    # --- deferred-call claims ---------------------------------------------------------

    def claim_calls(
        self, tools: Collection[str], claimer: str, lease_s: float, limit: int
    ) -> list[Claim]:
        return self.parts.call_claims.claim_calls(tools, claimer, lease_s, limit)

    def claim(self, token: str) -> Claim | None:
        return self.parts.call_claims.claim(token)

    def renew_claim(self, token: str, lease_s: float | None = None) -> Claim:
        return self.parts.call_claims.renew_claim(token, lease_s)

    def finish_claim(self, token: str) -> Claim:
        return self.parts.call_claims.finish_claim(token)

    def lapsed_claims(self, limit: int) -> list[Claim]:
        return self.parts.call_claims.lapsed_claims(limit)

    def settle_lapsed(self, token: str, state: Literal["released", "lapsed"]) -> bool:
        return self.parts.call_claims.settle_lapsed(token, state)

    def reopen_claims(self, session_id: str, call_id: str) -> None:
        self.parts.call_claims.reopen_claims(session_id, call_id)

    # --- the tool cache ---------------------------------------------------------------

    def get(self, tool: str, arguments: dict[str, Any]) -> ToolResult | None:
        return self.parts.cache.get(tool, arguments)

    def put(
        self, tool: str, arguments: dict[str, Any], result: ToolResult, ttl_s: float | None
    ) -> None:
        self.parts.cache.put(tool, arguments, result, ttl_s)


class ForwardsAudit(AuditLog):
    """An AuditLog whose methods are its `audit` part's (a backend's own trail)."""

    audit: AuditLog

    def append_audit(self, record: AuditRecord) -> None:
        self.audit.append_audit(record)

    def audit_records(self, query: AuditQuery) -> list[AuditRecord]:
        return self.audit.audit_records(query)
