"""Sessions as JSON files in a directory, for people who want to read or back them up.

    ROOT/sessions/ID.json    the session document (its `version` is the CAS counter)
    ROOT/agents/HASH.json    agent definitions
    ROOT/tokens/TOKEN        "SESSION_ID CALL_ID": the continuation index
    ROOT/.lock               an flock held while a write compares and swaps

Files are replaced atomically (write to a temporary file, fsync, rename). A SessionStore,
not a DurableStore: it has compare-and-set but no leases, fencing or effect ledger, so it
serves one process advancing its own sessions (the seed's single-process flow); the
engine refuses it for workers and anything that advances sessions concurrently. For
those, use SQLiteStore, or a CompositeStore whose primary is one.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, overload

from pydantic import ValidationError

from runner.state import Session, SessionT, SessionTail, load_document, now_ms
from runner.stores.base import (
    Continuation,
    SessionNotFound,
    SessionStore,
    SessionSummary,
    StoreError,
    VersionConflict,
)

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


class FileSessionStore(SessionStore):
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.description = f"file store {self.root}"
        self._thread_lock = threading.Lock()  # flock is per process: threads queue here
        try:
            for name in ("sessions", "agents", "tokens"):
                (self.root / name).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot open the file store {self.root}: {exc}") from None

    def _path(self, folder: str, name: str) -> Path:
        if not _SAFE_NAME.match(name):  # ids become file names: no path tricks
            raise StoreError(f"{name!r} is not a valid {folder[:-1]} name")
        return self.root / folder / (name if folder == "tokens" else f"{name}.json")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._thread_lock, open(self.root / ".lock", "a") as lock:
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

    def _index_tokens(self, session: SessionTail) -> None:
        for call in session.calls.values():
            path = self._path("tokens", call.token)
            if not path.exists():
                self._write(path, f"{session.id} {call.id}")

    def _read(self, path: Path) -> Session:
        try:
            return load_document(path.read_bytes())
        except (ValueError, ValidationError) as exc:
            raise StoreError(f"cannot read session file {path}: {exc}") from None

    def create(self, session: Session, agent_document: dict[str, Any]) -> Session:
        session.require_history("creating a session")
        stored = session.model_copy(update={"version": session.version or 1}, deep=True)
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

    @overload
    def load(self, session_id: str, *, history: Literal[True] = True) -> Session: ...

    @overload
    def load(self, session_id: str, *, history: bool) -> SessionTail: ...

    def load(self, session_id: str, *, history: bool = True) -> SessionTail:
        """The whole document, whatever `history` says: a file holds it all."""
        path = self._path("sessions", session_id)
        if not path.exists():
            raise SessionNotFound(session_id)
        return self._read(path)

    def with_history(self, tail: SessionTail) -> Session:
        if tail.has_history:
            return tail.require_history("with_history")
        return _merged(self.load(tail.id), tail)

    def save(self, session: SessionT) -> SessionT:
        stored = session.model_copy(update={"version": session.version + 1, "updated_ms": now_ms()})
        with self._locked():
            current = self.load(session.id)
            if current.version != session.version:
                raise VersionConflict(session.id, session.version, current.version)
            # Only the recent part came back: the file keeps the rest.
            whole = stored if stored.has_history else _merged(current, stored)
            self._index_tokens(whole)  # tokens first: a token never points nowhere
            self._write(self._path("sessions", session.id), whole.to_json())
        return stored

    def put_agent(self, agent_hash: str, agent_document: dict[str, Any]) -> None:
        with self._locked():
            path = self._path("agents", agent_hash)
            if not path.exists():
                self._write(path, json.dumps(agent_document, sort_keys=True))

    def agent_document(self, agent_hash: str) -> dict[str, Any]:
        try:
            document: dict[str, Any] = json.loads(
                self._path("agents", agent_hash).read_text(encoding="utf-8")
            )
        except FileNotFoundError:
            raise StoreError(f"no agent definition with hash {agent_hash[:12]}") from None
        return document

    def list(self, status: str | None = None) -> list[SessionSummary]:
        sessions = [self._read(p) for p in (self.root / "sessions").glob("*.json")]
        return sorted(
            (SessionSummary(s.id, s.status, s.agent_slug, s.version, s.updated_ms)
             for s in sessions if status is None or s.status == status),
            key=lambda s: s.updated_ms,
        )  # fmt: skip

    def find(self, token: str) -> Continuation | None:
        try:
            path = self._path("tokens", token)
        except StoreError:
            return None  # not a token this store could have made
        try:
            session_id, call_id = path.read_text().split(" ", 1)
        except FileNotFoundError:
            return None
        return Continuation(token, session_id, call_id)


def _merged(whole: Session, recent: SessionTail) -> Session:
    """`recent` (a history=False part) with the earlier turns and ended calls of `whole`."""
    earlier = whole.turns[: recent.first_turn]
    calls = {k: c for k, c in whole.calls.items() if c.terminal and k not in recent.calls}
    return Session.joined(recent, [*earlier, *recent.turns], {**calls, **recent.calls})
