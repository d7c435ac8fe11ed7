"""The OpenAI-compatible provider an agent without a `provider` section uses, configured
from the environment when the first model call is made.

`EnvironmentLLM` reads OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL (see
`EnvironmentProvider`) at its first `complete`, not when it is made: the session engine
makes a provider for every operation, and starting, inspecting or completing a session
must work on a machine that has no key. A missing key or model is an `LLMError` naming
the variables to set; it is not retryable, since trying again without setting them
cannot help.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from runner.lifecycle import AsyncClosing
from runner.llm.base import LLMClosedError, LLMError, LLMRequest, LLMResponse
from runner.llm.config import (
    API_KEY_VARIABLE,
    BASE_URL_VARIABLE,
    DEFAULT_BASE_URL,
    MODEL_VARIABLE,
    EnvironmentProvider,
)
from runner.llm.openai import OpenAICompatibleLLM


class EnvironmentLLM(AsyncClosing):
    """An `OpenAICompatibleLLM` made at the first request from `config` and `environ`
    (the process environment unless given), then kept for every later request."""

    def __init__(
        self, config: EnvironmentProvider, environ: Mapping[str, str] | None = None
    ) -> None:
        self.config = config
        self._environ = environ
        self._client: OpenAICompatibleLLM | None = None
        self._closed = False

    def resolve(self) -> OpenAICompatibleLLM:
        """The client the configuration and the environment describe (made once)."""
        if self._closed:
            raise LLMClosedError("this environment-configured provider is closed")
        if self._client is None:
            environ = os.environ if self._environ is None else self._environ
            if self.config.api_key_id is not None:
                try:
                    key = self.config.api_key()
                except ValueError as exc:
                    raise LLMError(str(exc)) from None
            else:
                key = environ.get(API_KEY_VARIABLE, "")
            model = self.config.model or environ.get(MODEL_VARIABLE, "")
            missing = [API_KEY_VARIABLE] if not key else []
            missing += [] if model else [MODEL_VARIABLE]
            if missing:
                raise LLMError(
                    "the agent has no `provider`, so it uses the OpenAI-compatible endpoint"
                    f" configured from the environment, and {' and '.join(missing)}"
                    f" {'is' if len(missing) == 1 else 'are'} unset or empty: set"
                    f" {API_KEY_VARIABLE} (the API key), {MODEL_VARIABLE} (the model) and"
                    f" optionally {BASE_URL_VARIABLE} (default {DEFAULT_BASE_URL}),"
                    " or give the agent a `provider`"
                )
            base_url = self.config.base_url or environ.get(BASE_URL_VARIABLE) or DEFAULT_BASE_URL
            if not base_url.startswith(("http://", "https://")):
                raise LLMError(f"{BASE_URL_VARIABLE}={base_url!r} is not an http(s) URL")
            self._client = OpenAICompatibleLLM(
                base_url, model, key, timeout_s=self.config.timeout_seconds,
                max_retries=self.config.max_retries,
            )  # fmt: skip
        return self._client

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return await self.resolve().complete(request)

    async def aclose(self) -> None:
        """Close the client if one was made; later requests are refused. Idempotent."""
        client, self._client, self._closed = self._client, None, True
        if client is not None:
            await client.aclose()
