"""The conversation as the LLM sees it: the system prompt, every turn (a prompt with its
attachments as image or text parts), the tools.

`Conversations` builds it incrementally: per session it keeps the messages of the turns
already sent (bounded, least recently used sessions dropped), so the next request adds
only the turns since and a step's cost does not grow with the session. What it keeps is
stored history: turns before the last never change, and it extends a session's entry
only once the model's answer is committed (`answered`), so a step whose commit was
refused leaves nothing behind. A session whose loaded turns begin after what is kept
(advanced by another process, or new to this one) has its history read once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, overload

from runner.llm import (
    ContentPart,
    ImagePart,
    LLMRequest,
    Message,
    RequestedCall,
    TextPart,
    ToolDefinition,
)
from runner.session.agent import Agent
from runner.session.policy import Defer, unwrap
from runner.state import Attachment, LlmTurn, Session, SessionTail, Turn, UserTurn

#: Sessions whose sent messages a Conversations keeps.
CONVERSATION_CACHE_SIZE = 256


def llm_request(agent: Agent, session: Session) -> LLMRequest:
    """The whole request, built from scratch from the whole session."""
    whole = session.require_history("the LLM's next request")  # a tail given untyped
    messages = [m for turn in whole.turns for m in turn_messages(turn)]
    return LLMRequest(agent.system_prompt, tuple(messages), tool_definitions(agent))


def turn_messages(turn: Turn) -> list[Message]:
    """What one turn says to the model (a partial user turn, nothing yet)."""
    if isinstance(turn, UserTurn):
        messages: list[Message] = []
        if turn.text is not None:
            parts = tuple(content_part(a) for a in turn.attachments)
            messages.append(Message("user", turn.text, parts=parts))
        messages.extend(
            Message("tool", e.result.text(), tool_call_id=e.tool_call_id) for e in turn.tool_results
        )
        return messages
    if isinstance(turn, LlmTurn):
        calls = tuple(RequestedCall(c.id, c.name, c.arguments) for c in turn.tool_calls)
        return [Message("assistant", turn.text, calls)]
    return []


@dataclass(frozen=True)
class Prompt:
    """A request and what it adds to the session's kept messages: the messages of turns
    `start` to `end` (exclusive), not kept until the answer is committed."""

    request: LLMRequest
    session_id: str
    start: int
    end: int
    new: tuple[Message, ...]


@dataclass
class _Kept:
    turns: int  # the messages of turns [0, turns) are in `messages`
    messages: list[Message]


class Conversations:
    """The messages sent so far, per session, for one agent (see the module docstring).
    Thread-safe; an entry is only appended to, so a request's messages are a copy."""

    def __init__(self, agent: Agent, size: int = CONVERSATION_CACHE_SIZE) -> None:
        self._agent = agent
        self._tools = tool_definitions(agent)
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    @overload
    def prompt(self, session: Session) -> Prompt: ...

    @overload
    def prompt(self, session: SessionTail) -> Prompt | None: ...

    def prompt(self, session: SessionTail) -> Prompt | None:
        """The next request for `session`, or None when the turns between what is kept
        and what a tail holds are in neither: give it again with its history (a whole
        Session always has its prompt)."""
        with self._lock:
            kept = self._kept.get(session.id)
            if kept is not None and not session.first_turn <= kept.turns <= session.turn_count:
                kept = None  # the loaded part begins after it (or the session is shorter)
            start = kept.turns if kept is not None else 0
            if start < session.first_turn:
                return None
            new = tuple(m for turn in session.turns[start - session.first_turn :]
                        for m in turn_messages(turn))  # fmt: skip
            sent = (*kept.messages, *new) if kept is not None else new
        request = LLMRequest(self._agent.system_prompt, sent, self._tools)
        return Prompt(request, session.id, start, session.turn_count, new)

    def answered(self, prompt: Prompt, answer: LlmTurn) -> None:
        """The model's answer to `prompt` is committed as turn `prompt.end`: keep it."""
        with self._lock:
            kept = self._kept.get(prompt.session_id)
            if kept is None or kept.turns != prompt.start:  # new, or replaced meanwhile
                if prompt.start != 0:
                    self._kept.pop(prompt.session_id, None)
                    return
                kept = self._kept[prompt.session_id] = _Kept(0, [])
            kept.messages.extend(prompt.new)
            kept.messages.extend(turn_messages(answer))
            kept.turns = prompt.end + 1
            self._kept.move_to_end(prompt.session_id)
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)


def content_part(attachment: Attachment) -> ContentPart:
    """An attachment as the model sees it: an image part, or its text under its name."""
    if attachment.kind == "image":
        return ImagePart(attachment.mime_type, attachment.data)
    return TextPart(f"Attached file {attachment.name}:\n{attachment.data}")


def undeclared_parameters() -> dict[str, Any]:
    """The arguments of a tool the policy names but the file does not declare: any object
    (a new dict each time: the tool definition owns it)."""
    return {"type": "object", "properties": {}, "additionalProperties": True}


def tool_definitions(agent: Agent) -> tuple[ToolDefinition, ...]:
    """The declared tools, then each tool a policy rule names that `tools` does not
    declare (agents-exe files name their tools only there): any object as arguments,
    and the rule's defer reason, if any, as its description."""
    tools = [ToolDefinition(t.name, t.description, t.parameters) for t in agent.tools]
    for rule in agent.policy.rules:
        name = rule.match.tool
        if agent.tool(name) is None and all(t.name != name for t in tools):
            _, base = unwrap(rule.disposition)
            why = f" ({base.reason})" if isinstance(base, Defer) else ""
            description = f"The {name} tool{why}."
            tools.append(ToolDefinition(name, description, undeclared_parameters()))
    return tuple(tools)
