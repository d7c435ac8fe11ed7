"""A provider that replays a script: the n-th assistant turn of a conversation gets the
n-th response, so replaying the same stored state always gives the same turn.

A response is `{"text": str?, "tool_calls": [{"id"?, "name", "arguments"}]}`. In `text`,
`{{result:ID}}` is replaced by the result the conversation holds for tool call ID, which
lets a scripted final answer quote what the tools really returned, and `{{attachments}}`
by what the user attached: one line per part, a text part's text or, for an image,
`[image MIME, N bytes]`.
"""

from __future__ import annotations

import base64
import re
from collections import OrderedDict
from typing import Any

from runner.lifecycle import AsyncClosing
from runner.llm.base import ImagePart, LLMError, LLMRequest, LLMResponse, Message, RequestedCall

_PLACEHOLDER = re.compile(r"\{\{result:([A-Za-z0-9_.:-]+)\}\}")


#: Conversations whose assistant turns a ScriptedLLM remembers having counted.
COUNTED_CONVERSATIONS = 256


class ScriptedLLM(AsyncClosing):
    """Replays `responses`; raises ValueError at construction for a malformed script.

    Which turn a request is needs its assistant messages counted; a request that extends
    an earlier one (as the engine builds them: the same messages, then new ones) counts
    only the new ones, so a turn costs the same at any length of the conversation."""

    def __init__(self, responses: list[dict[str, Any]]) -> None:
        self.responses = [_check(i, r) for i, r in enumerate(responses)]
        #: By the id of a conversation's first message: its messages as last counted
        #: (the tuple keeps them alive, so the id stays theirs) and how many were assistant's.
        self._counted: OrderedDict[int, tuple[tuple[Message, ...], int]] = OrderedDict()

    async def aclose(self) -> None:
        """Nothing to release: a script holds no connection."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        turn = self._assistant_turns(request.messages)
        if turn >= len(self.responses):
            raise LLMError(
                f"the script has {len(self.responses)} response(s) and turn {turn + 1} was asked"
            )
        response = self.responses[turn]
        text = response.get("text")
        if text is not None and "{{result:" in text:
            results = {m.tool_call_id: m.content or "" for m in request.messages
                       if m.role == "tool"}  # fmt: skip
            text = _PLACEHOLDER.sub(lambda m: results.get(m.group(1), m.group(0)), text)
        if text is not None and "{{attachments}}" in text:
            text = text.replace("{{attachments}}", _attachments(request))
        calls = tuple(
            RequestedCall(c.get("id") or f"call_{turn}_{i}", c["name"], c.get("arguments", {}))
            for i, c in enumerate(response.get("tool_calls", []))
        )
        return LLMResponse(text=text, tool_calls=calls)

    def _assistant_turns(self, messages: tuple[Message, ...]) -> int:
        if not messages:
            return 0
        key = id(messages[0])
        seen, count = self._counted.get(key, ((), 0))
        # Tuple equality compares element identity first: a shared prefix is cheap.
        if not seen or len(seen) > len(messages) or messages[: len(seen)] != seen:
            seen, count = (), 0
        count += sum(1 for m in messages[len(seen) :] if m.role == "assistant")
        self._counted[key] = (messages, count)
        self._counted.move_to_end(key)
        while len(self._counted) > COUNTED_CONVERSATIONS:
            self._counted.popitem(last=False)
        return count


def _attachments(request: LLMRequest) -> str:
    parts = [p for m in request.messages for p in m.parts]
    return "\n".join(
        f"[image {p.mime_type}, {len(base64.b64decode(p.base64_data))} bytes]"
        if isinstance(p, ImagePart) else p.text
        for p in parts
    )  # fmt: skip


def _check(index: int, response: Any) -> dict[str, Any]:
    where = f"script responses[{index}]"
    if not isinstance(response, dict) or set(response) - {"text", "tool_calls"}:
        raise ValueError(f"{where}: expected an object with `text` and/or `tool_calls`")
    if "text" in response and not isinstance(response["text"], str):
        raise ValueError(f"{where}.text: expected a string")
    for i, call in enumerate(response.get("tool_calls", [])):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ValueError(f"{where}.tool_calls[{i}]: expected an object with a `name`")
        if not isinstance(call.get("arguments", {}), dict):
            raise ValueError(f"{where}.tool_calls[{i}].arguments: expected an object")
    return response
