"""An OpenAI-compatible chat-completions client over httpx.

POST {base_url}/chat/completions with the conversation and the tools as functions; the
reply's `choices[0].message` gives the text and the tool calls. HTTP 429 and 5xx are
retried (honouring Retry-After, capped) up to `max_retries` times, then raised as a
retryable LLMError; other HTTP errors and malformed replies raise a non-retryable one.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import anyio
import httpx

from runner.llm.base import LLMError, LLMRequest, LLMResponse, Message, RequestedCall

#: Longest wait between attempts, whatever Retry-After asks for.
MAX_BACKOFF_S = 30.0


class OpenAICompatibleLLM:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        backoff_s: float = 0.5,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s

    @classmethod
    def from_config(cls, config: Any) -> OpenAICompatibleLLM:
        key = None
        if config.api_key_env:
            key = os.environ.get(config.api_key_env)
            if not key:
                raise LLMError(f"the API key variable {config.api_key_env} is unset or empty")
        return cls(config.base_url, config.model, key, timeout_s=config.timeout_seconds,
                   max_retries=config.max_retries)  # fmt: skip

    def body(self, request: LLMRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system_prompt:
            messages.append({"role": "system", "content": request.system_prompt})
        messages.extend(_message(m) for m in request.messages)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if request.tools:
            body["tools"] = [
                {"type": "function",
                 "function": {"name": t.name, "description": t.description,
                              "parameters": t.parameters}}
                for t in request.tools
            ]  # fmt: skip
        return body

    async def complete(self, request: LLMRequest) -> LLMResponse:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        body = self.body(request)
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            for attempt in range(self.max_retries + 1):
                last = attempt == self.max_retries
                try:
                    reply = await client.post(self.url, json=body, headers=headers)
                except httpx.HTTPError as exc:
                    if last:
                        message = f"{self.url}: {type(exc).__name__}: {exc}"
                        raise LLMError(message, retryable=True) from None
                    await anyio.sleep(self._backoff(attempt, None))
                    continue
                if reply.status_code == 429 or reply.status_code >= 500:
                    if last:
                        raise LLMError(
                            f"{self.url}: HTTP {reply.status_code} after {attempt + 1} attempt(s):"
                            f" {reply.text[:200]}",
                            retryable=True,
                        )
                    await anyio.sleep(self._backoff(attempt, reply.headers.get("retry-after")))
                    continue
                if reply.status_code != 200:
                    raise LLMError(f"{self.url}: HTTP {reply.status_code}: {reply.text[:200]}")
                return parse_reply(reply)
        raise AssertionError("unreachable")

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return min(max(float(retry_after), 0.0), MAX_BACKOFF_S)
            except ValueError:
                pass
        return min(self.backoff_s * 2**attempt * (0.5 + random.random()), MAX_BACKOFF_S)


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in message.tool_calls
        ]  # fmt: skip
    return out


def parse_reply(reply: httpx.Response) -> LLMResponse:
    """The first choice of a chat-completions reply; anything else is a clear LLMError."""
    try:
        message = reply.json()["choices"][0]["message"]
        calls = []
        for call in message.get("tool_calls") or []:
            arguments = json.loads(call["function"].get("arguments") or "{}")
            if not isinstance(arguments, dict):
                raise ValueError("tool call arguments are not a JSON object")
            calls.append(RequestedCall(call["id"], call["function"]["name"], arguments))
        text = message.get("content")
        if text is not None and not isinstance(text, str):
            raise ValueError("message.content is not a string")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise LLMError(f"malformed chat-completions reply: {type(exc).__name__}: {exc}") from None
    return LLMResponse(text=text, tool_calls=tuple(calls))
