"""Sessions as JSON files in a directory, for people who want to read or back them up.

    ROOT/sessions/ID.json    the session document (its `version` is the CAS counter)
    ROOT/agents/HASH.json    agent definitions
    ROOT/tokens/TOKEN        "SESSION_ID CALL_ID": the continuation index
    ROOT/.lock               an flock held while a write compares and swaps

Files are replaced atomically (write to a temporary file, fsync, rename). No tool cache:
pair it with SQLiteStore in a CompositeStore, or use SQLiteStore alone.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runner.session.models import Session, now_ms
from runner.stores.base import (
    Continuation,
    SessionNotFound,
    SessionSummary,
    StoreError,
    VersionConflict,
)

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


class FileSessionStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        for name in ("sessions", "agents", "tokens"):
            (self.root / name).mkdir(parents=True, exist_ok=True)

    def _path(self, folder: str, name: str) -> Path:
        if not _SAFE_NAME.match(name):  # ids become file names: no path tricks
            raise StoreError(f"{name!r} is not a valid {folder[:-1]} name")
        return self.root / folder / (name if folder == "tokens" else f"{name}.json")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.root / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, path: Path, text: str) -> None:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def _index_tokens(self, session: Session) -> None:
        for call in session.calls.values():
            path = self._path("tokens", call.token)
            if not path.exists():
                self._write(path, f"{session.id} {call.id}")

    def create(self, session: Session, agent_document: dict[str, Any]) -> Session:
        stored = session.model_copy(update={"version": session.version or 1})
        with self._locked():
            path = self._path("sessions", session.id)
            if path.exists():
                raise StoreError(f"session {session.id} already exists")
            agent_path = self._path("agents", session.agent_hash)
            if not agent_path.exists():
                self._write(agent_path, json.dumps(agent_document, sort_keys=True))
            self._index_tokens(stored)
            self._write(path, stored.to_json())
        return stored

    def load(self, session_id: str) -> Session:
        try:
            return Session.from_json(self._path("sessions", session_id).read_bytes())
        except FileNotFoundError:
            raise SessionNotFound(session_id) from None

    def save(self, session: Session) -> Session:
        stored = session.model_copy(update={"version": session.version + 1, "updated_ms": now_ms()})
        with self._locked():
            current = self.load(session.id).version
            if current != session.version:
                raise VersionConflict(session.id, session.version, current)
            self._index_tokens(stored)  # tokens first: a token never points nowhere
            self._write(self._path("sessions", session.id), stored.to_json())
        return stored

    def agent_document(self, agent_hash: str) -> dict[str, Any]:
        try:
            return json.loads(self._path("agents", agent_hash).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise StoreError(f"no agent definition with hash {agent_hash[:12]}") from None

    def list(self, status: str | None = None) -> list[SessionSummary]:
        sessions = [Session.from_json(p.read_bytes())
                    for p in (self.root / "sessions").glob("*.json")]  # fmt: skip
        return sorted(
            (SessionSummary(s.id, s.status, s.agent_slug, s.version, s.updated_ms)
             for s in sessions if status is None or s.status == status),
            key=lambda s: s.updated_ms,
        )  # fmt: skip

    def find(self, token: str) -> Continuation | None:
        try:
            session_id, call_id = self._path("tokens", token).read_text().split(" ", 1)
        except (FileNotFoundError, StoreError):
            return None
        return Continuation(token, session_id, call_id)
