"""The provider-neutral conversation a provider receives, and the turn it returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass(frozen=True)
class RequestedCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class TextPart:
    """A piece of text given with a user message (an attached text file, say)."""

    text: str


@dataclass(frozen=True)
class ImagePart:
    """An image given with a user message: its MIME type and its bytes in base64."""

    mime_type: str
    base64_data: str

    def data_url(self) -> str:
        return f"data:{self.mime_type};base64,{self.base64_data}"


ContentPart = TextPart | ImagePart


@dataclass(frozen=True)
class Message:
    """One message: `user` text (and any attached `parts`, after the text), `assistant`
    text and calls, or one `tool` result."""

    role: Literal["user", "assistant", "tool"]
    content: str | None = None
    tool_calls: tuple[RequestedCall, ...] = ()
    tool_call_id: str | None = None  # for role "tool"
    parts: tuple[ContentPart, ...] = ()  # for role "user"


@dataclass(frozen=True)
class ToolDefinition:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class LLMRequest:
    system_prompt: str
    messages: tuple[Message, ...]
    tools: tuple[ToolDefinition, ...] = ()


@dataclass(frozen=True)
class LLMResponse:
    text: str | None = None
    tool_calls: tuple[RequestedCall, ...] = field(default_factory=tuple)


class LLMError(Exception):
    """The provider could not give a turn; `retryable` says whether trying later can help,
    `retry_after_s` how long the server asked to wait first (its Retry-After), if it did."""

    def __init__(
        self, message: str, *, retryable: bool = False, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class LLMClosedError(LLMError):
    """The provider was closed (`aclose`) and refuses new requests; make a new one."""


class LLM(Protocol):
    """A provider: the model's next turn for a conversation.

    A provider may own resources (an HTTP connection pool); `aclose` releases them, may be
    called more than once, and after it `complete` raises `LLMClosedError`."""

    async def complete(self, request: LLMRequest) -> LLMResponse: ...

    async def aclose(self) -> None: ...
