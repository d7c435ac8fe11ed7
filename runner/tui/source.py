"""Where the console reads sessions and sends its actions: the `Source` interface and the
values it hands out. Two implementations: `StoreSource` (a store opened in this process,
the engine driven here; store.py) and `ServerSource` (`agents-runner serve` over HTTP;
server.py). Both hand out a session as the document `session show --json` prints and
GET /v1/sessions/{id} returns, so the screens draw one shape whatever the source.

Every action returns one line saying what happened; an expected failure (a call someone
else completed meanwhile, a refused resume, a store that cannot be reached) raises
`SourceError` with a message for the operator, never anything the screens must know.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from runner.session.results import ResultError, result_from_value, value_from_text
from runner.state import ToolResult

#: How long a source waits for a change before the screens refresh anyway (ages, expiry).
CHANGE_WAIT_S = 1.0
#: Output lines the console keeps per running call (the screen shows the last few).
LIVE_LINES = 20
#: Running calls whose live output a source keeps (the oldest heard of is let go first).
LIVE_CALLS = 64


class SourceError(Exception):
    """An action or a read that did not happen; the message says why, for the operator."""


@dataclass(frozen=True)
class SessionRow:
    """One line of the session list."""

    id: str
    status: str
    conditions: tuple[str, ...]
    agent: str
    updated_ms: int
    reason: str | None = None

    def matches(self, words: str) -> bool:
        """Every word of the filter appears in the id, the agent or a condition."""
        text = " ".join((self.id, self.agent, *self.conditions)).lower()
        return all(word in text for word in words.lower().split())


def answer_value(text: str) -> Any:
    """What an answer typed in the editor stands for, as `session complete` reads a file:
    JSON (a UserToolResponse, a ToolCallResult or any other value), or else the text."""
    if not text.strip():
        raise SourceError("the answer is empty; a result needs some content")
    return value_from_text(text)


def answer_result(text: str) -> ToolResult:
    """The result an answer gives its call (SourceError for a malformed UserToolResponse
    or envelope, naming what is wrong)."""
    try:
        return result_from_value(answer_value(text), "the answer")
    except ResultError as exc:
        raise SourceError(str(exc)) from exc


@dataclass
class LiveCall:
    """What one running call's worker has streamed so far, as the console heard it."""

    session_id: str
    call_id: str
    tool: str
    attempt: int
    #: The latest progress event (`fraction`, `text` its message), if any.
    progress: dict[str, Any] | None = None
    #: The last output lines: (`stdout`, `stderr` or `partial`, the line).
    lines: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=LIVE_LINES))


class LiveCalls:
    """The running calls' live output a source has heard (`call.output`, see
    docs/events.md), for the screen to draw; `generation` moves on each change."""

    def __init__(self) -> None:
        self._calls: OrderedDict[tuple[str, str], LiveCall] = OrderedDict()
        self.generation = 0

    def add(self, data: dict[str, Any]) -> None:
        """One `call.output` message's data (runner.session.output.LiveOutput.to_json);
        a malformed one is ignored (it comes from a server, maybe a newer one)."""
        event = data.get("event")
        session_id, call_id = data.get("session_id"), data.get("call_id")
        if not (isinstance(event, dict) and isinstance(session_id, str)
                and isinstance(call_id, str)):  # fmt: skip
            return
        found = data.get("attempt")
        attempt = found if isinstance(found, int) else 0
        key = (session_id, call_id)
        call = self._calls.get(key)
        if call is None or call.attempt != attempt:  # a new attempt starts afresh
            call = LiveCall(session_id, call_id, str(data.get("tool", "")), attempt)
        self._calls[key] = call
        self._calls.move_to_end(key)
        while len(self._calls) > LIVE_CALLS:
            self._calls.popitem(last=False)
        kind, text = event.get("type"), str(event.get("text", ""))
        if kind == "progress":
            call.progress = event
        elif kind in ("log", "partial"):
            where = str(event.get("stream", "stdout")) if kind == "log" else "partial"
            for line in text.splitlines() or [""]:
                call.lines.append((where, line))
        self.generation += 1

    def of(self, session_id: str) -> list[LiveCall]:
        """The session's calls heard of, in the order they were first heard."""
        return [c for (sid, _), c in self._calls.items() if sid == session_id]


class Source(ABC):
    """What the console needs: read sessions, act on them, and hear about changes."""

    #: Where the sessions are, for the title bar.
    description: str = "source"
    #: True when `start` can begin a new session (an agent file was given).
    can_start: bool = False
    #: The running calls' live output this source hears (each source sets its own).
    live: LiveCalls

    @abstractmethod
    async def now_ms(self) -> int:
        """The source's time (epoch ms), which ages and expiries are measured against."""

    @abstractmethod
    async def sessions(self) -> list[SessionRow]:
        """Every session, newest change first."""

    @abstractmethod
    async def session(self, session_id: str, *, history: bool = False) -> dict[str, Any]:
        """The session document; without `history` a source may give only its recent
        part (`first_turn` > 0 then says how many turns are left out)."""

    @abstractmethod
    async def complete(self, token: str, text: str) -> str:
        """Give the call with `token` the result `text` stands for (see answer_value),
        then continue its session here unless a live process holds it (autoResume)."""

    @abstractmethod
    async def fail(self, token: str, reason: str) -> str:
        """Fail the call with `token` (the model is told `reason`), then autoResume."""

    @abstractmethod
    async def resume(self, session_id: str, *, unquarantine: bool = False,
                     retry: bool = False) -> str:  # fmt: skip
        """Step the session until its final answer or its next wait (`unquarantine`: a
        quarantined one; `retry`: a failed one, with a fresh model-call budget)."""

    @abstractmethod
    async def cancel(self, session_id: str) -> str:
        """Cancel the session and every call still open."""

    @abstractmethod
    async def retry(self, token: str) -> str:
        """Run an unknown_outcome call again (`session retry --force`)."""

    @abstractmethod
    async def start(self, prompt: str) -> str:
        """Store a new session of the agent file with `prompt`: its id. `run` then
        advances it."""

    @abstractmethod
    async def run(self, session_id: str) -> str:
        """Advance a session just started until its final answer or first wait."""

    @abstractmethod
    async def changes(self, timeout_s: float = CHANGE_WAIT_S) -> bool:
        """Wait until something may have changed (True) or `timeout_s` passed (False)."""

    async def aclose(self) -> None:  # noqa: B027  nothing to release unless a source holds it
        """Release what the source holds (the caller closes the store it gave)."""


def plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


__all__ = [
    "CHANGE_WAIT_S",
    "LiveCall",
    "LiveCalls",
    "SessionRow",
    "Source",
    "SourceError",
    "answer_result",
    "answer_value",
    "plural",
]
