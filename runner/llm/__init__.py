"""LLM providers: given the conversation so far, the model's next turn.

`LLM` is the protocol (`await llm.complete(request) -> LLMResponse`, `await llm.aclose()`).
`ScriptedLLM` replays a JSON script (the demo and the tests); `OpenAICompatibleLLM` speaks
the chat-completions format over HTTP and owns one connection pool until it is closed.
`ProviderConfig` (`ScriptedProvider | OpenAIProvider | EnvironmentProvider`) is an agent
file's `provider` section (an agent without one uses `EnvironmentProvider`: OPENAI_BASE_URL,
OPENAI_API_KEY, OPENAI_MODEL, read at the first request by `EnvironmentLLM`), and
`provider_for(config)` builds the LLM it describes; whoever calls it owns the
result and closes it. A provider raises `LLMError` (with `retryable`) for failures; it
never sees a session or the store.
"""

from __future__ import annotations

from typing import assert_never

from runner.llm.base import (
    LLM,
    ContentPart,
    ImagePart,
    LLMClosedError,
    LLMError,
    LLMRequest,
    LLMResponse,
    Message,
    RequestedCall,
    TextPart,
    ToolDefinition,
)
from runner.llm.config import (
    API_KEY_VARIABLE,
    BASE_URL_VARIABLE,
    MODEL_VARIABLE,
    EnvironmentProvider,
    OpenAIProvider,
    ProviderConfig,
    ScriptedProvider,
)
from runner.llm.environment import EnvironmentLLM
from runner.llm.openai import OpenAICompatibleLLM
from runner.llm.scripted import ScriptedLLM


def provider_for(config: ScriptedProvider | OpenAIProvider | EnvironmentProvider) -> LLM:
    """The LLM an agent's `provider` section describes (not yet connected; an
    `environment` one reads its variables at its first request)."""
    if isinstance(config, ScriptedProvider):
        return ScriptedLLM(config.responses or [])
    if isinstance(config, OpenAIProvider):
        return OpenAICompatibleLLM.from_config(config)
    if isinstance(config, EnvironmentProvider):
        return EnvironmentLLM(config)
    assert_never(config)


__all__ = [
    "API_KEY_VARIABLE",
    "BASE_URL_VARIABLE",
    "LLM",
    "MODEL_VARIABLE",
    "ContentPart",
    "EnvironmentLLM",
    "EnvironmentProvider",
    "ImagePart",
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
    "TextPart",
    "ToolDefinition",
    "provider_for",
]
