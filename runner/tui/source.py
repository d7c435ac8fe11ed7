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
from dataclasses import dataclass
from typing import Any

from runner.session.results import ResultError, result_from_value, value_from_text
from runner.state import ToolResult

#: How long a source waits for a change before the screens refresh anyway (ages, expiry).
CHANGE_WAIT_S = 1.0


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


class Source(ABC):
    """What the console needs: read sessions, act on them, and hear about changes."""

    #: Where the sessions are, for the title bar.
    description: str = "source"
    #: True when `start` can begin a new session (an agent file was given).
    can_start: bool = False

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
    "SessionRow",
    "Source",
    "SourceError",
    "answer_result",
    "answer_value",
    "plural",
]
