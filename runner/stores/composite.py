"""A store made of several: reads fall through in order, writes go to the first.

A session found only in a later store is copied into the primary (keeping its version)
before the primary's compare-and-set applies, so the primary becomes its home. Typical
use: a new SQLite store in front of an older file store being migrated away from.

A composite is exactly as durable as its primary: `CompositeStore(sqlite, files)` is a
DurableStore whose leases, fencing, ledger and cache are the primary's (a fenced save goes
to the primary with its fences), while `CompositeStore(files, sqlite)` is a plain
SessionStore, which the engine refuses wherever it needs fencing.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

from runner.state import Session, ToolResult
from runner.stores.base import (
    Claim,
    Continuation,
    DurableStore,
    Effect,
    Event,
    Lease,
    SessionNotFound,
    SessionStore,
    SessionSummary,
    StoreError,
)


class CompositeStore(SessionStore):
    """`CompositeStore(primary, *fallbacks)`; a durable primary makes it a
    DurableCompositeStore (the constructor picks the class, so the guarantee follows
    the primary and cannot be lost by wrapping)."""

    def __new__(cls, primary: SessionStore, *fallbacks: SessionStore) -> CompositeStore:
        if cls is CompositeStore and isinstance(primary, DurableStore):
            cls = DurableCompositeStore
        return super().__new__(cls)

    def __init__(self, primary: SessionStore, *fallbacks: SessionStore) -> None:
        self.primary = primary
        self.stores: tuple[SessionStore, ...] = (primary, *fallbacks)
        self.description = " in front of ".join(s.description for s in self.stores)

    def close(self) -> None:
        for store in self.stores:
            store.close()

    def create(self, session: Session, agent_document: dict[str, Any]) -> Session:
        return self.primary.create(session, agent_document)

    def load(self, session_id: str, *, history: bool = True) -> Session:
        for store in self.stores:
            try:
                return store.load(session_id, history=history)
            except SessionNotFound:
                continue
        raise SessionNotFound(session_id)

    def with_history(self, session: Session) -> Session:
        return self._home(session.id).with_history(session)

    def _home(self, session_id: str) -> SessionStore:
        for store in self.stores:
            try:
                store.load(session_id, history=False)
            except SessionNotFound:
                continue
            return store
        raise SessionNotFound(session_id)

    def _adopt(self, session: Session) -> None:
        """Copy a session that lives only in a fallback into the primary, whole."""
        try:
            self.primary.load(session.id, history=False)
        except SessionNotFound:
            home = self.load(session.id)  # raises if nobody has it
            self.primary.create(home, self.agent_document(home.agent_hash))

    def save(self, session: Session) -> Session:
        self._adopt(session)
        return self.primary.save(session)

    def put_agent(self, agent_hash: str, agent_document: dict[str, Any]) -> None:
        self.primary.put_agent(agent_hash, agent_document)

    def agent_document(self, agent_hash: str) -> dict[str, Any]:
        for store in self.stores:
            try:
                return store.agent_document(agent_hash)
            except StoreError:
                continue
        raise StoreError(f"no agent definition with hash {agent_hash[:12]} in any store")

    def list(self, status: str | None = None) -> list[SessionSummary]:
        seen: dict[str, SessionSummary] = {}
        for store in self.stores:
            for summary in store.list(status):
                seen.setdefault(summary.id, summary)
        return sorted(seen.values(), key=lambda s: s.updated_ms)

    def find(self, token: str) -> Continuation | None:
        return next((c for s in self.stores if (c := s.find(token)) is not None), None)


class DurableCompositeStore(CompositeStore, DurableStore):
    """A composite whose primary is durable: everything that guards or records runs in
    the primary, so a session adopted from a fallback is fenced like any other."""

    primary: DurableStore

    def save(self, session: Session, fences: tuple[Lease, ...] = ()) -> Session:
        self._adopt(session)
        return self.primary.save(session, fences)

    def acquire_lease(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        return self.primary.acquire_lease(name, owner, ttl_s)

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        return self.primary.renew_lease(lease, ttl_s)

    def wait_for_due(self, timeout_s: float) -> bool:
        return self.primary.wait_for_due(timeout_s)

    def events(self, after: int, limit: int = 500, session_id: str | None = None) -> list[Event]:
        """The primary's log (a fallback's session has events once adopted)."""
        return self.primary.events(after, limit, session_id)

    def last_event_seq(self) -> int:
        return self.primary.last_event_seq()

    def wait_for_events(self, timeout_s: float) -> bool:
        return self.primary.wait_for_events(timeout_s)

    def release_lease(self, lease: Lease) -> None:
        self.primary.release_lease(lease)

    def lease(self, name: str) -> Lease | None:
        return self.primary.lease(name)

    def now_ms(self) -> int:
        return self.primary.now_ms()

    def due_sessions(self, limit: int, exclude: Collection[str] = ()) -> list[str]:
        """The primary's due sessions (a fallback's are due once adopted)."""
        return self.primary.due_sessions(limit, exclude)

    def effect(self, idempotency_key: str) -> Effect | None:
        return self.primary.effect(idempotency_key)

    def record_effect(self, effect: Effect, fences: tuple[Lease, ...] = ()) -> None:
        self.primary.record_effect(effect, fences)

    def record_late(self, token: str, session_id: str, call_id: str, result: ToolResult) -> None:
        self.primary.record_late(token, session_id, call_id, result)

    def late_results(self, session_id: str) -> list[tuple[str, ToolResult]]:
        return self.primary.late_results(session_id)

    def claim_calls(
        self, tools: Collection[str], worker: str, lease_s: float, limit: int
    ) -> list[Claim]:
        """The primary's claimable calls (a fallback's session is claimable once adopted)."""
        return self.primary.claim_calls(tools, worker, lease_s, limit)

    def claim(self, token: str) -> Claim | None:
        return self.primary.claim(token)

    def renew_claim(self, token: str, lease_s: float | None = None) -> Claim:
        return self.primary.renew_claim(token, lease_s)

    def finish_claim(self, token: str) -> Claim:
        return self.primary.finish_claim(token)

    def lapsed_claims(self, limit: int) -> list[Claim]:
        return self.primary.lapsed_claims(limit)

    def settle_lapsed(self, token: str, state: Literal["released", "lapsed"]) -> bool:
        return self.primary.settle_lapsed(token, state)

    def reopen_claims(self, session_id: str, call_id: str) -> None:
        self.primary.reopen_claims(session_id, call_id)

    def get(self, tool: str, arguments: dict[str, Any]) -> ToolResult | None:
        return self.primary.get(tool, arguments)

    def put(
        self, tool: str, arguments: dict[str, Any], result: ToolResult, ttl_s: float | None
    ) -> None:
        self.primary.put(tool, arguments, result, ttl_s)
