"""What a session is made of, as stored: turns, tracked tool calls and their results.

Every model round-trips exactly through JSON (`Session.to_json` / `Session.from_json`);
the store keeps that document, so nothing needed to continue lives only in memory.

Models are plain values: no I/O, no cache, no link to a store. A store may hand out only
the recent part of a session, a `SessionTail` (a `Session` is the whole one); turns are
append only (only the last one is replaced, when a partial user turn folds) and a
terminal call never changes, so a store can tell what is new by itself. How states move
is in transitions.py.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runner.state.dispositions import detached

#: Version of the session document; a store refuses documents newer than this. A field
#: the engine only shows and never decides by (TrackedCall.output) is added without a
#: bump: a document lacking it is complete as it is, so nothing needs migrating.
SESSION_SCHEMA_VERSION = 3
#: What each version changed, for the message that refuses an unmigrated session.
SCHEMA_CHANGES: Mapping[int, str] = MappingProxyType(
    {
        2: "durable retries, deferred-call expiry, the unknown_outcome call state, quarantine",
        3: "durable model-call retries and the failed status; paused is now called frozen;"
        " prompt attachments",
    }
)

CallState = Literal["ready", "running", "deferred", "unknown_outcome", "completed", "failed",
                    "expired", "cancelled"]  # fmt: skip
TerminalCallState = Literal["completed", "failed", "expired", "cancelled"]
#: States a call never leaves.
TERMINAL_STATES: frozenset[CallState] = frozenset(get_args(TerminalCallState))
#: Every call state, in the order the docs list them.
CALL_STATES: tuple[CallState, ...] = get_args(CallState)
#: The error code of a result that says "the outcome is unknown; an operator decides".
UNKNOWN_OUTCOME = "UNKNOWN_OUTCOME"

#: running: can be stepped; waiting: needs results from outside (deferred or detached
#: isolated calls, or an operator for an unknown outcome); frozen: an operator stopped it;
#: quarantined: recovery kept killing its workers; failed: its model call failed for good
#: (`failure_reason` says why); completed: final answer given.
SessionStatus = Literal["running", "waiting", "frozen", "quarantined", "failed", "completed",
                        "cancelled"]  # fmt: skip
SESSION_STATUSES: tuple[SessionStatus, ...] = get_args(SessionStatus)
#: Stored statuses from before a rename, read as their new name.
RENAMED_STATUSES: Mapping[str, str] = MappingProxyType({"paused": "frozen"})


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


class Attachment(Model):
    """A file given with a prompt: an image the model sees as an image part (`data` is
    base64), or UTF-8 text it sees as a text part (`data` is the text)."""

    kind: Literal["image", "text"]
    name: str  # the file's name, without its directories
    mime_type: str
    data: str


class UserTurn(Model):
    """A prompt (with any attachments), or the complete results of the previous LLM
    turn's tool calls."""

    kind: Literal["user"] = "user"
    text: str | None = None
    #: Files given with the prompt (empty in documents written before attachments).
    attachments: list[Attachment] = Field(default_factory=list)
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


class CallEvent(Model):
    """One event a call's worker streamed while it ran (runner.isolation.WorkerEvent,
    stored): a `log` line of its `stream`, a `progress` `fraction` with `text` as its
    message, or `partial` output. `seq` numbers the attempt's delivered events from 1."""

    seq: int
    at_ms: int
    type: Literal["log", "progress", "partial"]
    text: str = ""
    stream: Literal["stdout", "stderr"] | None = None
    fraction: float | None = None


class CallOutput(Model):
    """The end of what an isolated call's `attempt` streamed (runner.session.output
    bounds it): its last `events`, oldest first, and its latest `progress` even when
    that is older than them; `delivered` events in all, `dropped` over the budget (the
    worker's count and the runner's), `invalid` lines the runner refused."""

    attempt: int
    events: list[CallEvent] = Field(default_factory=list)
    progress: CallEvent | None = None
    delivered: int = 0
    dropped: int = 0
    invalid: int = 0


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
    #: Counted in the store before each attempt starts when a worker gets it or its
    #: effects are external; a contained in-process attempt is stored with its result.
    attempts: int = 0
    #: Retry budget (attempts in all) and when the next attempt may start (epoch ms).
    max_attempts: int | None = None
    next_attempt_ms: int | None = None
    last_error: ToolResult | None = None
    #: When a deferred call expires (epoch ms), if it has an expiry.
    expires_ms: int | None = None
    idempotency_key: str
    result: ToolResult | None = None
    #: The end of what the worker streamed in the latest attempt that streamed anything
    #: (isolated calls whose worker sends events; None otherwise, and in documents
    #: written before events existed).
    output: CallOutput | None = None
    created_ms: int = Field(default_factory=now_ms)
    updated_ms: int = Field(default_factory=now_ms)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class HistoryNotLoaded(Exception):
    """Something needed the whole conversation, but only its recent part was loaded."""


class SessionTail(Model):
    """What of a session can still change: its header, its turns from `first_turn` on
    and its calls that may still change (the open ones and those of the last turn).

    A store hands one out from `load(..., history=False)`: then `turns` starts at turn
    `first_turn` (the last stored turn) and `calls` holds the open calls and those of
    the last LLM turn. Turns before it and calls that ended before it never change;
    `with_history(tail)` reads them when something needs the whole conversation (the
    LLM's next request, an operator's view) and returns a `Session`. Code that needs
    the whole conversation takes a `Session`, so it cannot be given a tail by mistake;
    code that only advances a session (a step, a completion, a commit) takes a tail, which a
    whole Session also is. A store hands out a tail that holds everything (it begins at
    turn 0) as a Session.
    """

    id: str
    schema_version: int = SESSION_SCHEMA_VERSION
    agent_slug: str
    agent_hash: str
    status: SessionStatus = "running"
    #: Compare-and-set counter, owned by the store: each committed write adds one.
    version: int = 0
    #: Index of `turns[0]` in the whole conversation; 0 when the history is all here.
    first_turn: int = 0
    turns: list[Turn] = Field(default_factory=list)
    calls: dict[str, TrackedCall] = Field(default_factory=dict)
    final_answer: str | None = None
    quarantine_reason: str | None = None
    #: Why the session is `failed` (its model call's last error), for `session show`.
    failure_reason: str | None = None
    #: The model call being made: attempts counted in the store before each request
    #: (reset once one succeeds), when the next may start (epoch ms), its last error.
    llm_attempts: int = 0
    llm_next_attempt_ms: int | None = None
    llm_last_error: str | None = None
    created_ms: int = Field(default_factory=now_ms)
    updated_ms: int = Field(default_factory=now_ms)

    @field_validator("status", mode="before")
    @classmethod
    def _renamed(cls, value: Any) -> Any:
        """An older store's `paused` is today's `frozen`."""
        return RENAMED_STATUSES.get(value, value) if isinstance(value, str) else value

    @property
    def has_history(self) -> bool:
        """True when every turn and call is here (not only the recent part)."""
        return self.first_turn == 0

    def require_history(self, purpose: str) -> Session:
        """This session as a whole `Session` (itself, when it is one); HistoryNotLoaded
        when it holds only its recent part. The types already keep a tail from code that
        needs a Session: this is the check at run time, for callers the types miss."""
        if not self.has_history:
            raise HistoryNotLoaded(
                f"session {self.id}: {purpose} needs its whole history, but only the turns"
                f" from {self.first_turn} on were loaded; load it with its history first"
            )
        return self if isinstance(self, Session) else Session.joined(self, self.turns, self.calls)

    @property
    def turn_count(self) -> int:
        return self.first_turn + len(self.turns)

    def header_json(self) -> str:
        """The session without its turns and calls (a store keeps those as rows)."""
        return self.model_dump_json(exclude={"turns", "calls", "first_turn"})

    def replace_last_turn(self, turn: UserTurn | LlmTurn | PartialUserTurn) -> None:
        self.turns[-1] = turn

    def call(self, call_id: str) -> TrackedCall:
        return self.calls[call_id]

    def to_json(self) -> str:
        return self.model_dump_json()

    def call_by_token(self, token: str) -> TrackedCall | None:
        """The call with this continuation token, among the calls held."""
        return next((c for c in self.calls.values() if c.token == token), None)

    def open_calls(self) -> list[TrackedCall]:
        return [c for c in self.calls.values() if not c.terminal]

    def waiting_on(self) -> list[TrackedCall]:
        """Calls that only something outside this step can finish."""
        outside = ("deferred", "unknown_outcome")
        return [c for c in self.open_calls() if c.state in outside or detached(c.disposition)]

    def due_ms(self) -> int | None:
        """When a worker should next advance this session; None: only outside input can."""
        if self.status not in ("running", "waiting"):
            return None
        if self.status == "running" and not self.open_calls():
            return self.llm_next_attempt_ms or self.updated_ms  # a model call's backoff
        times = [c.expires_ms for c in self.open_calls()
                 if c.state == "deferred" and c.expires_ms is not None]  # fmt: skip
        times += [c.next_attempt_ms or self.updated_ms for c in self.open_calls()
                  if c.state in ("ready", "running")]  # fmt: skip
        return min(times) if times else None

    @property
    def last_turn(self) -> UserTurn | LlmTurn | PartialUserTurn | None:
        return self.turns[-1] if self.turns else None


class Session(SessionTail):
    """A whole session: every turn and every call, what the store holds (a tail that
    begins at turn 0). What a session is made of is SessionTail's fields."""

    #: A whole session begins at the first turn.
    first_turn: Literal[0] = 0

    @classmethod
    def start(cls, agent_slug: str, agent_hash: str, prompt: str) -> Session:
        return cls(
            id=f"s-{uuid.uuid4()}",
            agent_slug=agent_slug,
            agent_hash=agent_hash,
            turns=[UserTurn(text=prompt)],
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Session:
        return cls.model_validate_json(text)

    @classmethod
    def joined(cls, tail: SessionTail, turns: list[Turn], calls: dict[str, TrackedCall]) -> Session:
        """The whole session `tail` is the end of: its header with `turns` and `calls`,
        which are all of them (a shallow copy, as `model_copy` makes)."""
        values = {**tail.__dict__, "first_turn": 0, "turns": turns, "calls": calls}
        fields = tail.model_fields_set | {"turns", "calls"}
        return cls.model_construct(_fields_set=fields, **values)


def tail_from(session: SessionTail, first_turn: int, **update: Any) -> SessionTail:
    """`session` with `update`, holding the turns from `first_turn` on (a shallow copy,
    as `model_copy` makes): a Session when that is the first turn, so that a store's
    tail is whole exactly when it holds everything."""
    kind = Session if first_turn == 0 else SessionTail
    values = {**session.__dict__, **update, "first_turn": first_turn}
    fields = session.model_fields_set | update.keys()
    return kind.model_construct(_fields_set=fields, **values)


#: A session or a tail, whichever is given (a store's `save` returns what it was given).
SessionT = TypeVar("SessionT", bound=SessionTail)


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


def migrate(session: SessionT) -> SessionT:
    """Bring an older session document to SESSION_SCHEMA_VERSION (every change so far
    only added fields with defaults, or renamed a status that `Session` reads under its
    new name, so the document itself needs no rewriting)."""
    return session.model_copy(update={"schema_version": SESSION_SCHEMA_VERSION})
