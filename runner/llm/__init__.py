"""LLM providers: given the conversation so far, the model's next turn.

`LLM` is the protocol (`await llm.complete(request) -> LLMResponse`, `await llm.aclose()`).
`ScriptedLLM` replays a JSON script (the demo and the tests); `OpenAICompatibleLLM` speaks
the chat-completions format over HTTP and owns one connection pool until it is closed.
`ProviderConfig` (`ScriptedProvider | OpenAIProvider`) is an agent file's `provider`
section, and `provider_for(config)` builds the LLM it describes; whoever calls it owns the
result and closes it. A provider raises `LLMError` (with `retryable`) for failures; it
never sees a session or the store.
"""

from __future__ import annotations

from typing import assert_never

from runner.llm.base import (
    LLM,
    LLMClosedError,
    LLMError,
    LLMRequest,
    LLMResponse,
    Message,
    RequestedCall,
    ToolDefinition,
)
from runner.llm.config import OpenAIProvider, ProviderConfig, ScriptedProvider
from runner.llm.openai import OpenAICompatibleLLM
from runner.llm.scripted import ScriptedLLM


def provider_for(config: ScriptedProvider | OpenAIProvider) -> LLM:
    """The LLM an agent's `provider` section describes (not yet connected)."""
    if isinstance(config, ScriptedProvider):
        return ScriptedLLM(config.responses or [])
    if isinstance(config, OpenAIProvider):
        return OpenAICompatibleLLM.from_config(config)
    assert_never(config)


__all__ = [
    "LLM",
    "LLMClosedError",
    "LLMError",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "OpenAICompatibleLLM",
    "OpenAIProvider",
    "ProviderConfig",
    "RequestedCall",
    "ScriptedLLM",
    "ScriptedProvider",
    "ToolDefinition",
    "provider_for",
]
