"""An OpenAI-compatible chat-completions client over httpx.

POST {base_url}/chat/completions with the conversation and the tools as functions (a user
message with attachments sends its content as `text` and `image_url` parts); the reply's
`choices[0].message` gives the text and the tool calls. HTTP 429 and 5xx, and transport
errors, are retried (honouring Retry-After, capped at MAX_BACKOFF_S) up to
`max_retries` times, then raised as a retryable LLMError (with the server's Retry-After);
other HTTP errors and malformed replies raise a non-retryable one. The session engine
builds its providers with `max_retries=0` and retries under the budget it stores with the
session (the agent's `llmRetries`), so that in-memory retries never multiply that budget.

The provider owns one `httpx.AsyncClient`, and so one connection pool, for its whole life:
created at the first request, reused by every later one, and released by `aclose()` (or by
leaving `async with`). Its lifecycle is one explicit state, `new -> open -> closed`; a
closed provider refuses requests with `LLMClosedError` rather than reopening behind its
owner's back.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal, Self

import anyio
import httpx

from runner.lifecycle import AsyncClosing
from runner.llm.base import (
    ContentPart,
    ImagePart,
    LLMClosedError,
    LLMError,
    LLMRequest,
    LLMResponse,
    Message,
    RequestedCall,
)
from runner.llm.config import OpenAIProvider

logger = logging.getLogger(__name__)

#: Longest wait between attempts, whatever Retry-After asks for.
MAX_BACKOFF_S = 30.0

#: How the provider waits between attempts; tests pass one that records instead of sleeping.
Sleep = Callable[[float], Awaitable[None]]

ClientState = Literal["new", "open", "closed"]


class OpenAICompatibleLLM(AsyncClosing):
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        sleep: Sleep = anyio.sleep,
        unusable: str | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        # Why every request fails before it is sent (a key variable unset), if it does: a
        # session made with this provider then fails at its first model call, visibly,
        # with its id, instead of the command failing before or after making it.
        self.unusable = unusable
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._sleep = sleep
        self._client: httpx.AsyncClient | None = None
        self._state: ClientState = "new"

    @classmethod
    def from_config(cls, config: OpenAIProvider) -> OpenAICompatibleLLM:
        key, unusable = None, None
        if config.api_key_env:
            key = os.environ.get(config.api_key_env)
            if not key:
                unusable = (f"the API key variable {config.api_key_env} (the provider's"
                            " apiKeyEnv) is unset or empty")  # fmt: skip
        return cls(config.base_url, config.model, key, timeout_s=config.timeout_seconds,
                   max_retries=config.max_retries, unusable=unusable)  # fmt: skip

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def state(self) -> ClientState:
        """`new` (no connection yet), `open` (a client and its pool), or `closed`."""
        return self._state

    async def __aenter__(self) -> Self:
        self._open()
        return self

    async def aclose(self) -> None:
        """Close the connection pool; later requests are refused. Idempotent."""
        client, self._client, self._state = self._client, None, "closed"
        if client is not None:
            await client.aclose()

    def _open(self) -> httpx.AsyncClient:
        if self._state == "closed":
            raise LLMClosedError(f"{self.url}: this provider is closed; make a new one")
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s)
            self._state = "open"
        return self._client

    # --- the request ----------------------------------------------------------------------

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
        if self.unusable is not None:
            raise LLMError(self.unusable)  # not retryable: the same environment fails again
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        body = self.body(request)
        attempts = self.max_retries + 1
        for attempt in range(1, attempts + 1):
            client = self._open()  # each attempt: closed while backing off is refused here
            try:
                reply = await client.post(self.url, json=body, headers=headers)
            except httpx.HTTPError as exc:
                why = f"{type(exc).__name__}: {exc}"
                if attempt == attempts:
                    message = f"{self.url}: {why} after {attempt} attempt(s)"
                    raise LLMError(message, retryable=True) from exc
                await self._wait(attempt, why, self._backoff(attempt, None))
                continue
            if reply.status_code == 429 or reply.status_code >= 500:
                if attempt == attempts:
                    asked = reply.headers.get("retry-after")
                    raise LLMError(
                        f"{self.url}: HTTP {reply.status_code} after {attempt} attempt(s):"
                        f" {reply.text[:200]}",
                        retryable=True,
                        retry_after_s=_retry_after_s(asked) if asked is not None else None,
                    )
                delay = self._backoff(attempt, reply.headers.get("retry-after"))
                await self._wait(attempt, f"HTTP {reply.status_code}", delay)
                continue
            if reply.status_code != 200:
                raise LLMError(f"{self.url}: HTTP {reply.status_code}: {reply.text[:200]}")
            return parse_reply(reply)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _wait(self, attempt: int, why: str, delay_s: float) -> None:
        logger.warning(
            "%s: attempt %d of %d failed (%s); retrying in %.2fs",
            self.url, attempt, self.max_retries + 1, why, delay_s,
        )  # fmt: skip
        await self._sleep(delay_s)

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        """Seconds before attempt `attempt + 1`: what Retry-After asks for if it parses,
        else exponential with jitter; never more than MAX_BACKOFF_S."""
        if retry_after is not None:
            asked = _retry_after_s(retry_after)
            if asked is not None:
                return min(max(asked, 0.0), MAX_BACKOFF_S)
            logger.warning("%s: ignoring an unreadable Retry-After %r", self.url, retry_after)
        jitter = 0.5 + random.random()
        return min(self.backoff_s * jitter * 2.0 ** (attempt - 1), MAX_BACKOFF_S)


def _retry_after_s(value: str) -> float | None:
    """Retry-After as seconds from now: delay-seconds or an HTTP date (RFC 9110)."""
    try:
        seconds = float(value)
    except ValueError:
        pass  # not delay-seconds; try the HTTP-date form below
    else:
        return seconds if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime.now(UTC)).total_seconds()


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.parts:  # then content is a list of parts, the message's text first
        text = [{"type": "text", "text": message.content}] if message.content else []
        out["content"] = text + [_part(p) for p in message.parts]
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in message.tool_calls
        ]  # fmt: skip
    return out


def _part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, ImagePart):
        return {"type": "image_url", "image_url": {"url": part.data_url()}}
    return {"type": "text", "text": part.text}


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
