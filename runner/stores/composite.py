"""A store made of several: reads fall through in order, writes go to the first.

A session found only in a later store is copied into the primary (keeping its version)
before the primary's compare-and-set applies, so the primary becomes its home. Typical
use: a new SQLite store in front of an older file store being migrated away from.
"""

from __future__ import annotations

from typing import Any

from runner.session.models import Session
from runner.stores.base import Continuation, SessionNotFound, SessionSummary, StoreError


class CompositeStore:
    def __init__(self, primary: Any, *fallbacks: Any) -> None:
        self.primary = primary
        self.stores = (primary, *fallbacks)

    def create(self, session: Session, agent_document: dict[str, Any]) -> Session:
        return self.primary.create(session, agent_document)

    def load(self, session_id: str) -> Session:
        for store in self.stores:
            try:
                return store.load(session_id)
            except SessionNotFound:
                continue
        raise SessionNotFound(session_id)

    def save(self, session: Session) -> Session:
        try:
            self.primary.load(session.id)
        except SessionNotFound:
            home = self.load(session.id)  # raises if nobody has it
            self.primary.create(home, self.agent_document(home.agent_hash))
        return self.primary.save(session)

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

    # The tool cache is the primary's, when it has one.
    def get(self, tool: str, arguments: dict[str, Any]) -> Any:
        return self.primary.get(tool, arguments)

    def put(self, tool: str, arguments: dict[str, Any], result: Any, ttl_s: float | None) -> None:
        self.primary.put(tool, arguments, result, ttl_s)
