"""A store made of several: reads fall through in order, writes go to the first.

A session found only in a later store is copied into the primary (keeping its version)
before the primary's compare-and-set applies, so the primary becomes its home. Typical
use: a new SQLite store in front of an older file store being migrated away from.

That is the composite's sessions part (CompositeSessions); everything else is its
primary's. So a composite is exactly as durable as its primary: `CompositeStore(sqlite,
files)` is a DurableStore whose leases, fencing, event log, ledger, claims and cache are
the primary's parts (a fenced save goes to the primary with its fences), while
`CompositeStore(files, sqlite)` is a plain SessionStore, which the engine refuses
wherever it needs fencing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal, overload

from runner.state import Session, SessionT, SessionTail
from runner.stores.base import (
    Continuation,
    DurableStore,
    FencedSessions,
    Lease,
    SessionNotFound,
    SessionStore,
    SessionSummary,
    StoreError,
)
from runner.stores.composed import ComposedStore, ForwardsSessions, StoreParts


class CompositeSessions(FencedSessions):
    """Sessions that fall through `stores` on reads and go to the first on writes."""

    def __init__(self, primary: SessionStore, *fallbacks: SessionStore) -> None:
        self.primary = primary
        self.stores: tuple[SessionStore, ...] = (primary, *fallbacks)
        self.description = " in front of ".join(s.description for s in self.stores)

    def close(self) -> None:
        for store in self.stores:
            store.close()

    def create(self, session: Session, agent_document: dict[str, Any]) -> Session:
        return self.primary.create(session, agent_document)

    @overload
    def load(self, session_id: str, *, history: Literal[True] = True) -> Session: ...

    @overload
    def load(self, session_id: str, *, history: bool) -> SessionTail: ...

    def load(self, session_id: str, *, history: bool = True) -> SessionTail:
        for store in self.stores:
            try:
                return store.load(session_id, history=history)
            except SessionNotFound:
                continue
        raise SessionNotFound(session_id)

    def with_history(self, tail: SessionTail) -> Session:
        return self._home(tail.id).with_history(tail)

    def _home(self, session_id: str) -> SessionStore:
        for store in self.stores:
            try:
                store.load(session_id, history=False)
            except SessionNotFound:
                continue
            return store
        raise SessionNotFound(session_id)

    def _adopt(self, session: SessionTail) -> None:
        """Copy a session that lives only in a fallback into the primary, whole."""
        try:
            self.primary.load(session.id, history=False)
        except SessionNotFound:
            home = self.load(session.id)  # raises if nobody has it
            self.primary.create(home, self.agent_document(home.agent_hash))

    def save(self, session: SessionT, fences: tuple[Lease, ...] = ()) -> SessionT:
        """The primary's compare-and-set, with its fences when it can check them."""
        self._adopt(session)
        if isinstance(self.primary, FencedSessions):
            return self.primary.save(session, fences)
        if fences:
            raise StoreError(f"the {self.primary.description} cannot check fences")
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


class CompositeStore(ForwardsSessions):
    """`CompositeStore(primary, *fallbacks)`; a durable primary makes it a
    DurableCompositeStore (the constructor picks the class, so the guarantee follows
    the primary and cannot be lost by wrapping)."""

    sessions: CompositeSessions

    def __new__(cls, primary: SessionStore, *fallbacks: SessionStore) -> CompositeStore:
        if cls is CompositeStore and isinstance(primary, DurableStore):
            cls = DurableCompositeStore
        return super().__new__(cls)

    def __init__(self, primary: SessionStore, *fallbacks: SessionStore) -> None:
        self.sessions = CompositeSessions(primary, *fallbacks)
        self.primary = primary
        self.stores = self.sessions.stores
        self.description = self.sessions.description

    def close(self) -> None:
        self.sessions.close()


class DurableCompositeStore(CompositeStore, ComposedStore):
    """A composite whose primary is durable: the primary's parts with the composite's
    sessions swapped in, so everything that guards or records runs in the primary and a
    session adopted from a fallback is fenced like any other. The primary's one-round-trip
    LeasedSessions would bypass the fallbacks: a composite's are the plain calls."""

    primary: DurableStore

    def __init__(self, primary: DurableStore, *fallbacks: SessionStore) -> None:
        CompositeStore.__init__(self, primary, *fallbacks)
        ComposedStore.__init__(
            self, replace(StoreParts.of(primary), sessions=self.sessions, leased=None)
        )
