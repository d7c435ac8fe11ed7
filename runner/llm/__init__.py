"""LLM providers: given the conversation so far, the model's next turn.

`LLM` is the protocol (`await llm.complete(request) -> LLMResponse`). `ScriptedLLM`
replays a JSON script (the demo and the tests); `OpenAICompatibleLLM` speaks the
chat-completions format over HTTP. `provider_for(agent)` builds the one an agent names.
A provider raises `LLMError` (with `retryable`) for failures; it never sees the store.
"""

from __future__ import annotations

from runner.llm.base import (
    LLM,
    LLMError,
    LLMRequest,
    LLMResponse,
    Message,
    RequestedCall,
    ToolDefinition,
)
from runner.llm.openai import OpenAICompatibleLLM
from runner.llm.scripted import ScriptedLLM


def provider_for(provider: object) -> LLM:
    """The LLM an agent's `provider` section describes."""
    from runner.session.agent import OpenAIProvider, ScriptedProvider

    if isinstance(provider, ScriptedProvider):
        return ScriptedLLM(provider.responses or [])
    if isinstance(provider, OpenAIProvider):
        return OpenAICompatibleLLM.from_config(provider)
    raise TypeError(f"unknown provider {provider!r}")


__all__ = [
    "LLM",
    "LLMError",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "OpenAICompatibleLLM",
    "RequestedCall",
    "ScriptedLLM",
    "ToolDefinition",
    "provider_for",
]
