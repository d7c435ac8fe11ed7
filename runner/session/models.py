"""What a session is made of, as stored: turns, tracked tool calls and their results.

Every model round-trips exactly through JSON (`Session.to_json` / `Session.from_json`);
the store keeps that document, so nothing needed to continue lives only in memory.

A store may load a session partly (`Stored`): its header, its last turn, and the calls that
can still change; the settled history (earlier turns, calls that ended before the last
turn) is read from the store the first time `turns` or `calls` is used. Turns are append
only (only the last one is replaced, when a partial user turn folds) and a terminal call
never changes, so a store writes only what is new (`Session.unsaved`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

#: Version of the session document; a store refuses documents newer than this.
SESSION_SCHEMA_VERSION = 2
#: What each version changed, for the message that refuses an unmigrated session.
SCHEMA_CHANGES = {
    2: "durable retries, deferred-call expiry, the unknown_outcome call state, quarantine",
}

CallState = Literal["ready", "running", "deferred", "unknown_outcome", "completed", "failed",
                    "expired", "cancelled"]  # fmt: skip
#: States a call never leaves.
TERMINAL_STATES: frozenset[str] = frozenset({"completed", "failed", "expired", "cancelled"})
#: The error code of a result that says "the outcome is unknown; an operator decides".
UNKNOWN_OUTCOME = "UNKNOWN_OUTCOME"

#: running: can be stepped; waiting: needs results from outside (deferred or detached
#: isolated calls, or an operator for an unknown outcome); paused: an operator stopped it;
#: quarantined: recovery kept killing its workers; completed: final answer given.
SessionStatus = Literal["running", "waiting", "paused", "quarantined", "completed", "cancelled"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


def new_token() -> str:
    """A continuation token: the handle by which a result finds its call."""
    return str(uuid.uuid4())


def now_ms() -> int:
    return int(time.time() * 1000)


class ToolCall(Model):
    """One tool call as the LLM asked for it."""

    id: str
    name: str
    arguments: dict[str, Any]


class ToolResult(Model):
    """What a call produced; `content` is what the model is shown."""

    status: Literal["ok", "error", "expired", "cancelled"]
    content: Any  # text or any JSON value
    error_code: str | None = None
    retryable: bool = False

    @classmethod
    def ok(cls, content: Any) -> ToolResult:
        return cls(status="ok", content=content)

    @classmethod
    def error(cls, code: str, message: str, retryable: bool = False) -> ToolResult:
        return cls(status="error", content=message, error_code=code, retryable=retryable)

    def text(self) -> str:
        """The result as the model reads it."""
        body = self.content if isinstance(self.content, str) else json.dumps(self.content)
        if self.status == "ok":
            return body
        code = f" {self.error_code}" if self.error_code else ""
        return f"[{self.status}{code}] {body}"


class UserTurn(Model):
    """A prompt, or the complete results of the previous LLM turn's tool calls."""

    kind: Literal["user"] = "user"
    text: str | None = None
    tool_results: list[ToolResultEntry] = Field(default_factory=list)


class ToolResultEntry(Model):
    tool_call_id: str
    tool: str
    result: ToolResult


class LlmTurn(Model):
    kind: Literal["llm"] = "llm"
    text: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)


class PartialUserTurn(Model):
    """The user turn being gathered: the calls of the LLM turn before it, in order.
    It becomes a UserTurn once every call has reached a terminal state."""

    kind: Literal["partial_user"] = "partial_user"
    call_ids: list[str]


UserTurn.model_rebuild()
Turn = Annotated[UserTurn | LlmTurn | PartialUserTurn, Field(discriminator="kind")]


class TrackedCall(Model):
    """A tool call the runtime is responsible for, from classification to result."""

    id: str  # the LLM's tool_call_id, unique within the session
    token: str  # continuation token (UUID): how a result from outside finds this call
    tool: str
    arguments: dict[str, Any]
    state: CallState
    disposition: dict[str, Any]  # the policy's decision, as JSON (see session.policy)
    turn: int  # index of the LLM turn that asked for it
    label: str | None = None
    defer_reason: str | None = None
    attempts: int = 0  # counted in the store before each attempt starts
    #: Retry budget (attempts in all) and when the next attempt may start (epoch ms).
    max_attempts: int | None = None
    next_attempt_ms: int | None = None
    last_error: ToolResult | None = None
    #: When a deferred call expires (epoch ms), if it has an expiry.
    expires_ms: int | None = None
    idempotency_key: str
    result: ToolResult | None = None
    created_ms: int = Field(default_factory=now_ms)
    updated_ms: int = Field(default_factory=now_ms)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


@dataclass
class Stored:
    """What one store holds of a session, so that a save writes only what changed.

    `reader`, while the history is unread: (turns before the last, calls that ended before
    the last turn), exactly as they were when the session was loaded."""

    store: object  # the store this describes: another store gets the whole session
    turn_count: int  # turns in the store
    settled: set[str] = field(default_factory=set)  # calls stored as terminal: never rewritten
    last_turn: UserTurn | LlmTurn | PartialUserTurn | None = None
    live_calls: dict[str, TrackedCall] = field(default_factory=dict)  # open + last turn's
    reader: Callable[[], tuple[list[Any], dict[str, TrackedCall]]] | None = None
    history: tuple[list[Any], dict[str, TrackedCall]] | None = None


class Session(Model):
    id: str
    schema_version: int = SESSION_SCHEMA_VERSION
    agent_slug: str
    agent_hash: str
    status: SessionStatus = "running"
    #: Compare-and-set counter, owned by the store: each committed write adds one.
    version: int = 0
    turns: list[Turn] = Field(default_factory=list)
    calls: dict[str, TrackedCall] = Field(default_factory=dict)
    final_answer: str | None = None
    quarantine_reason: str | None = None
    created_ms: int = Field(default_factory=now_ms)
    updated_ms: int = Field(default_factory=now_ms)
    _stored: Stored | None = PrivateAttr(default=None)

    def __getattr__(self, name: str) -> Any:
        # `turns` and `calls` are absent from __dict__ while a partly loaded session's
        # history is unread: read it now (pydantic handles every other name).
        if name in ("turns", "calls") and self._stored is not None:
            self._read_history()
            return self.__dict__[name]
        return super().__getattr__(name)  # type: ignore[misc]

    def _read_history(self) -> None:
        stored = self._stored
        if stored is None or self.history_read:
            return
        if stored.history is None:  # copies (model_copy) share one Stored: read once
            assert stored.reader is not None
            stored.history = stored.reader()
            stored.settled |= stored.history[1].keys()
        earlier, settled = stored.history
        last = [stored.last_turn] if stored.last_turn is not None else []
        calls = sorted({**settled, **stored.live_calls}.values(), key=lambda c: c.turn)
        self.__dict__["turns"] = [*earlier, *last]
        self.__dict__["calls"] = {c.id: c for c in calls}

    @property
    def history_read(self) -> bool:
        return "turns" in self.__dict__ or self._stored is None

    def materialize(self) -> Session:
        """Read whatever history is still in the store; returns self."""
        self._read_history()
        return self

    def __eq__(self, other: object) -> bool:
        """Same fields, whatever each side has read so far (what a store knows is not
        part of the session)."""
        if not isinstance(other, Session):
            return NotImplemented
        self._read_history()
        other._read_history()
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        self._read_history()
        return super().model_dump(**kwargs)

    def model_dump_json(self, **kwargs: Any) -> str:
        self._read_history()
        return super().model_dump_json(**kwargs)

    def header_json(self) -> str:
        """The session without its turns and calls (a store keeps those as rows)."""
        return super().model_dump_json(exclude={"turns", "calls"})

    @property
    def turn_count(self) -> int:
        if self.history_read:
            return len(self.turns)
        return self._stored.turn_count

    def replace_last_turn(self, turn: UserTurn | LlmTurn | PartialUserTurn) -> None:
        if self.history_read:
            self.turns[-1] = turn
        else:
            self._stored.last_turn = turn

    def _live_calls(self) -> dict[str, TrackedCall]:
        """Every open call (and the last turn's), without reading the settled history."""
        if self.history_read:
            return self.calls
        return self._stored.live_calls

    def call(self, call_id: str) -> TrackedCall:
        live = self._live_calls()
        return live[call_id] if call_id in live else self.calls[call_id]

    def unsaved(self, store: object) -> tuple[int, list[Any], list[TrackedCall]]:
        """What `store` lacks: (index of the first turn to write, those turns, the calls)."""
        stored = self._stored
        if stored is None or stored.store is not store:
            return 0, list(self.turns), list(self.calls.values())
        first = max(stored.turn_count - 1, 0)
        if self.history_read:
            turns = self.turns[first:]
        else:
            turns = [stored.last_turn] if stored.last_turn is not None else []
        calls = [c for c in self._live_calls().values() if c.id not in stored.settled]
        return first, turns, calls

    def mark_saved(self, store: object, calls: list[TrackedCall]) -> None:
        """After a save to `store` wrote `calls`: remember what it now holds."""
        if self._stored is None or self._stored.store is not store:
            self._read_history()
            self._stored = Stored(store, self.turn_count)
        else:
            self._stored.turn_count = self.turn_count
        self._stored.settled |= {c.id for c in calls if c.terminal}

    @classmethod
    def start(cls, agent_slug: str, agent_hash: str, prompt: str) -> Session:
        return cls(
            id=f"s-{uuid.uuid4()}",
            agent_slug=agent_slug,
            agent_hash=agent_hash,
            turns=[UserTurn(text=prompt)],
        )

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> Session:
        return cls.model_validate_json(text)

    def call_by_token(self, token: str) -> TrackedCall | None:
        live = next((c for c in self._live_calls().values() if c.token == token), None)
        return live or next((c for c in self.calls.values() if c.token == token), None)

    def open_calls(self) -> list[TrackedCall]:
        return [c for c in self._live_calls().values() if not c.terminal]

    def waiting_on(self) -> list[TrackedCall]:
        """Calls that only something outside this step can finish."""
        outside = ("deferred", "unknown_outcome")
        return [c for c in self.open_calls() if c.state in outside or _detached(c)]

    def due_ms(self) -> int | None:
        """When a worker should next advance this session; None: only outside input can."""
        if self.status not in ("running", "waiting"):
            return None
        if self.status == "running" and not self.open_calls():
            return self.updated_ms
        times = [c.expires_ms for c in self.open_calls()
                 if c.state == "deferred" and c.expires_ms is not None]  # fmt: skip
        times += [c.next_attempt_ms or self.updated_ms for c in self.open_calls()
                  if c.state in ("ready", "running")]  # fmt: skip
        return min(times) if times else None

    @property
    def last_turn(self) -> UserTurn | LlmTurn | PartialUserTurn | None:
        if self.history_read:
            return self.turns[-1] if self.turns else None
        return self._stored.last_turn


def load_document(text: str | bytes) -> Session:
    """A stored session document; one from a newer program is refused by name."""
    data = json.loads(text)
    version = data.get("schema_version", 1) if isinstance(data, dict) else None
    if isinstance(version, int) and version > SESSION_SCHEMA_VERSION:
        raise ValueError(
            f"session {data.get('id')} has session schema {version}, newer than this"
            f" program's {SESSION_SCHEMA_VERSION}; upgrade agents-runner"
        )
    return Session.model_validate(data)


def migrate(session: Session) -> Session:
    """Bring an older session document to SESSION_SCHEMA_VERSION (every change so far
    only added fields with defaults, so the document itself needs no rewriting)."""
    return session.model_copy(update={"schema_version": SESSION_SCHEMA_VERSION})


def _detached(call: TrackedCall) -> bool:
    inner = call.disposition
    while inner.get("tag") == "decorate":
        inner = inner["inner"]
    return inner.get("tag") == "runIsolated" and inner.get("attached") is False
