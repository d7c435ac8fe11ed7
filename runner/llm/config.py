"""What an agent file says about its LLM: the `provider` section, validated.

These models are the configuration only; `runner.llm.provider_for(config)` turns one into
an `LLM`. They live here, beside the providers they configure, so that the session layer
imports them from below and nothing in `runner.llm` needs to know what a session is.
`tag` chooses the branch of the union (`scripted`, `openaiCompatible` or `environment`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from runner.llm.keys import ApiKeys


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ScriptedProvider(_Config):
    """Replays a script (see `ScriptedLLM`): given inline as `responses`, or as `script`,
    a JSON file relative to the agent file that the agent loader reads into `responses`."""

    tag: Literal["scripted"] = "scripted"
    #: A JSON file (relative to the agent file) with {"responses": [...]}; read at load.
    script: str | None = None
    responses: list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ScriptedProvider:
        if self.responses is None and self.script is None:
            raise ValueError("a scripted provider needs `script` (a file) or `responses`")
        return self


class OpenAIProvider(_Config):
    """An OpenAI-compatible chat-completions endpoint (see `OpenAICompatibleLLM`)."""

    tag: Literal["openaiCompatible"] = "openaiCompatible"
    base_url: Annotated[str, Field(alias="baseUrl", pattern=r"^https?://")]
    model: Annotated[str, Field(min_length=1)]
    #: Name of the environment variable holding the API key (never the key itself).
    api_key_env: Annotated[str | None, Field(alias="apiKeyEnv")] = None
    timeout_seconds: Annotated[float, Field(alias="timeoutSeconds", gt=0)] = 60.0
    max_retries: Annotated[int, Field(alias="maxRetries", ge=0, le=10)] = 2


#: The variables an `environment` provider reads, and the endpoint it uses without one.
BASE_URL_VARIABLE = "OPENAI_BASE_URL"
API_KEY_VARIABLE = "OPENAI_API_KEY"
MODEL_VARIABLE = "OPENAI_MODEL"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class EnvironmentProvider(_Config):
    """An OpenAI-compatible endpoint configured from the environment, as agents-exe's
    agent files expect: what an agent without a `provider` uses.

    The base URL is `baseUrl`, else OPENAI_BASE_URL, else the OpenAI API; the model is
    `model`, else OPENAI_MODEL; the key is OPENAI_API_KEY, or with `apiKeyId` (agents-exe's)
    the key of that id, resolved by the command that loads the file (`with_key`) and held
    in this object only, never in its document. The variables are read at the first model
    call, not when the agent is loaded, so a session can be started (or inspected) on a
    machine without a key."""

    tag: Literal["environment"] = "environment"
    base_url: Annotated[str | None, Field(alias="baseUrl", pattern=r"^https?://")] = None
    model: Annotated[str | None, Field(min_length=1)] = None
    timeout_seconds: Annotated[float, Field(alias="timeoutSeconds", gt=0)] = 60.0
    max_retries: Annotated[int, Field(alias="maxRetries", ge=0, le=10)] = 2
    #: agents-exe's key id: the key is the one of this id in the keys the loader was given.
    api_key_id: Annotated[str | None, Field(alias="apiKeyId", min_length=1)] = None
    _api_key: str | None = PrivateAttr(default=None)
    _key_problem: str | None = PrivateAttr(default=None)

    def with_key(self, keys: ApiKeys | None) -> EnvironmentProvider:
        """This provider holding the value of its `apiKeyId` from `keys` (or, when `keys`
        has none, why: the first model call then fails with that message)."""
        copied = self.model_copy()
        if self.api_key_id is None:
            return copied
        value = keys.get(self.api_key_id) if keys is not None else None
        copied._api_key = value or None
        copied._key_problem = None if value else (keys or ApiKeys()).missing(self.api_key_id)
        return copied

    @property
    def has_key(self) -> bool:
        """Whether the value of `apiKeyId` is held here (never shown)."""
        return self._api_key is not None

    def api_key(self) -> str:
        """The value of `apiKeyId`; ValueError saying where it was looked for without one."""
        if self._api_key is None:
            raise ValueError(self._key_problem or ApiKeys().missing(self.api_key_id or ""))
        return self._api_key


#: An agent's `provider` section: one of the providers above, chosen by `tag`.
ProviderConfig = Annotated[
    ScriptedProvider | OpenAIProvider | EnvironmentProvider, Field(discriminator="tag")
]
