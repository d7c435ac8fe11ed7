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
from typing import Any

from runner.lifecycle import AsyncClosing
from runner.llm.base import ImagePart, LLMError, LLMRequest, LLMResponse, RequestedCall

_PLACEHOLDER = re.compile(r"\{\{result:([A-Za-z0-9_.:-]+)\}\}")


class ScriptedLLM(AsyncClosing):
    """Replays `responses`; raises ValueError at construction for a malformed script."""

    def __init__(self, responses: list[dict[str, Any]]) -> None:
        self.responses = [_check(i, r) for i, r in enumerate(responses)]

    async def aclose(self) -> None:
        """Nothing to release: a script holds no connection."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if turn >= len(self.responses):
            raise LLMError(
                f"the script has {len(self.responses)} response(s) and turn {turn + 1} was asked"
            )
        response = self.responses[turn]
        results = {m.tool_call_id: m.content or "" for m in request.messages if m.role == "tool"}
        text = response.get("text")
        if text is not None:
            text = _PLACEHOLDER.sub(lambda m: results.get(m.group(1), m.group(0)), text)
            text = text.replace("{{attachments}}", _attachments(request))
        calls = tuple(
            RequestedCall(c.get("id") or f"call_{turn}_{i}", c["name"], c.get("arguments", {}))
            for i, c in enumerate(response.get("tool_calls", []))
        )
        return LLMResponse(text=text, tool_calls=calls)


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
