"""agents-exe's UserToolResponse: the result shape its users write by hand.

agents-exe hands a tool result around as a UserToolResponse:
`{"type": "text", "content": str}`, `{"type": "json", "content": any}`,
`{"type": "media", "mimeType", "base64Data", "filename"?}` or
`{"type": "mixed", "parts": [...]}` (parts: `{"type": "text", "text"}` or media).
`parse_user_tool_response` reads one, in agents-exe's camelCase or the v1 envelope's
snake_case (`mime_type`, `base64_data`, and `content` for a text part), into the v1
`Output` it means, with the v1 bounds (MIME type, base64, filename, part count) checked.

agents-exe's isolation envelope, which its workers read on stdin and answer on stdout:
`encode_request` turns a v1 ToolCallRequest into agents-exe's request
(`{"token", "toolCall", "contextSnapshot", "policy", "reason"?}`) and `decode_result`
reads its answer (`{"token", "status": "success"|"error", "result"?, "error"?}`) back
into a v1 ToolCallResult, as strictly as `codec.decode_result` reads a v1 one. What only
agents-exe's request has (the policy, a reason, the turn) travels in the v1 request's
extensions (POLICY_EXTENSION, REASON_EXTENSION, TURN_EXTENSION); see docs/envelope-v1.md.
"""

from __future__ import annotations

import uuid
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from envelopes import wire
from envelopes.codec import MalformedOutput, describe_validation_error
from envelopes.v1 import (
    MAX_PARTS,
    JsonOutput,
    MediaOutput,
    MixedOutput,
    Output,
    TextOutput,
    ToolCallRequest,
    ToolCallResult,
    WorkerErrorCode,
)

#: The `type` values of a UserToolResponse.
RESPONSE_TYPES = ("text", "json", "media", "mixed")
_OUTPUT: TypeAdapter[TextOutput | JsonOutput | MediaOutput | MixedOutput] = TypeAdapter(Output)
_MEDIA_NAMES = MappingProxyType({"mimeType": "mime_type", "base64Data": "base64_data"})


class UserToolResponseError(ValueError):
    """A value shaped like a UserToolResponse that is not a valid one; says where."""


def looks_like_user_tool_response(value: Any) -> bool:
    """True for a JSON object whose `type` is one of RESPONSE_TYPES."""
    return isinstance(value, dict) and value.get("type") in RESPONSE_TYPES


def parse_user_tool_response(value: Any, where: str = "result") -> Output:
    """The v1 output a UserToolResponse means; UserToolResponseError if it is not one."""
    return _OUTPUT.validate_python(_normalise(value, where), strict=True)


def _normalise(value: Any, where: str) -> dict[str, Any]:
    if not looks_like_user_tool_response(value):
        kinds = ", ".join(RESPONSE_TYPES)
        raise UserToolResponseError(f"{where}: expected an object whose type is one of {kinds}")
    kind = value["type"]
    allowed = {
        "text": {"type", "content", "text"},
        "json": {"type", "content"},
        "media": {"type", "mimeType", "base64Data", "mime_type", "base64_data", "filename"},
        "mixed": {"type", "parts"},
    }[kind]
    extra = sorted(set(value) - allowed)
    if extra:
        raise UserToolResponseError(
            f"{where}: a {kind!r} response has no field {', '.join(map(repr, extra))}"
            " (to send an arbitrary object as a JSON result, wrap it:"
            ' {"type": "json", "content": ...})'
        )
    if kind == "text":
        texts = [k for k in ("content", "text") if k in value]
        if len(texts) != 1 or not isinstance(value[texts[0]], str):
            raise UserToolResponseError(f"{where}: a text response needs `content`, a string")
        return {"type": "text", "content": value[texts[0]]}
    if kind == "json":
        if "content" not in value:
            raise UserToolResponseError(f"{where}: a json response needs `content`")
        return dict(value)
    if kind == "media":
        media = {_MEDIA_NAMES.get(k, k): v for k, v in value.items()}
        for name in ("mime_type", "base64_data"):
            if name not in media:
                raise UserToolResponseError(f"{where}: a media response needs `{name}`")
        if len(media) != len(value):
            raise UserToolResponseError(f"{where}: give each media field once")
        _check(MediaOutput, media, where)
        return media
    parts = value.get("parts")
    if not isinstance(parts, list):
        raise UserToolResponseError(f"{where}: a mixed response needs `parts`, a list")
    if len(parts) > MAX_PARTS:
        raise UserToolResponseError(f"{where}.parts: more than {MAX_PARTS} parts")
    return {"type": "mixed", "parts": [
        _normalise(p, f"{where}.parts[{i}]") for i, p in enumerate(parts)
    ]}  # fmt: skip


def _check(model: type[MediaOutput], data: dict[str, Any], where: str) -> None:
    try:
        model.model_validate(data, strict=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"])
        raise UserToolResponseError(f"{where}.{field}: {error['msg']}") from None


# --- the isolation envelope ----------------------------------------------------------

#: Extensions of a v1 request that carry what only agents-exe's request has: the
#: disposition in agents-exe's JSON, why the call runs isolated, and the LLM turn.
POLICY_EXTENSION = "agents-exe/policy"
REASON_EXTENSION = "agents-exe/reason"
TURN_EXTENSION = "agents-exe/turn"
#: The code of a worker's `"status": "error"`: agents-exe's error is free text.
ERROR_CODE: WorkerErrorCode = "TOOL_FAILED"
NIL_UUID = "00000000-0000-0000-0000-000000000000"
_RESULT_FIELDS = ("token", "status", "result", "error")


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)


class FunctionCall(_Request):
    name: str
    #: JSON text, as the OpenAI API sends it (agents-exe passes the call on untouched).
    arguments: str


class LlmToolCall(_Request):
    """The LLM's tool call in OpenAI's raw form, which is what agents-exe keeps."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ContextSnapshot(_Request):
    """agents-exe's ToolExecutionContextSnapshot, under its Haskell field names."""

    session_id: Annotated[str, Field(alias="tecsSessionId")]
    conversation_id: Annotated[str, Field(alias="tecsConversationId")]
    turn_id: Annotated[str, Field(alias="tecsTurnId")]
    call_stack: Annotated[list[Any], Field(alias="tecsCallStack")] = []
    allowed_tools: Annotated[list[str], Field(alias="tecsAllowedTools")] = []
    parent_conversation: Annotated[str | None, Field(alias="tecsParentConversation")] = None
    params: Annotated[dict[str, Any], Field(alias="tecsParams")] = {}


class IsolationEnvelope(_Request):
    """What an agents-exe worker reads on stdin."""

    token: str
    tool_call: Annotated[LlmToolCall, Field(alias="toolCall")]
    context_snapshot: Annotated[ContextSnapshot, Field(alias="contextSnapshot")]
    policy: dict[str, Any]
    reason: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """agents-exe's JSON: camelCase keys, `reason` omitted when there is none."""
        data = self.model_dump(mode="json", by_alias=True)
        if data["reason"] is None:
            del data["reason"]
        return data


class IsolationResultEnvelope(BaseModel):
    """What an agents-exe worker writes on stdout; read closed and strict."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    token: str
    status: Literal["success", "error"]
    #: A UserToolResponse (see parse_user_tool_response); null counts as absent.
    result: Any = None
    error: str | None = None


def docker_policy(image: str) -> dict[str, Any]:
    """agents-exe's disposition for a call run in a container of `image`."""
    return {"tag": "runIsolated", "spec": {"tag": "docker", "image": image}}


def local_process_policy(path: str) -> dict[str, Any]:
    """agents-exe's disposition for a call run by the worker program at `path`."""
    return {"tag": "runIsolated", "spec": {"tag": "localProcess", "path": path}}


def as_uuid(text: str | None) -> str:
    """`text` as the UUID agents-exe's identifiers are: itself when it is one, the UUID
    after a prefix (`s-<uuid>`, as session ids are), else one derived from it (the same
    text always gives the same UUID). NIL_UUID for none."""
    if not text:
        return NIL_UUID
    for candidate in (text, text.partition("-")[2]):
        try:
            return str(uuid.UUID(candidate))
        except ValueError:
            continue
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"agents-runner:{text}"))


def isolation_envelope(
    request: ToolCallRequest, default_policy: dict[str, Any]
) -> IsolationEnvelope:
    """agents-exe's request for a v1 one: the token is the request's id, the tool call is
    rebuilt in OpenAI's form, and the policy is the request's POLICY_EXTENSION or, without
    one, `default_policy` (the runner's own spec). ValueError when an extension is wrong."""
    extensions = request.extensions or {}
    policy = extensions.get(POLICY_EXTENSION, default_policy)
    if not isinstance(policy, dict) or not isinstance(policy.get("tag"), str):
        raise ValueError(f"extensions.{POLICY_EXTENSION}: expected a disposition with a `tag`")
    reason = extensions.get(REASON_EXTENSION)
    if reason is not None and not isinstance(reason, str):
        raise ValueError(f"extensions.{REASON_EXTENSION}: expected a string")
    turn = extensions.get(TURN_EXTENSION)
    context = request.context
    session_id = as_uuid(context.session_id if context else None)
    turn_id = NIL_UUID
    if isinstance(turn, int) and not isinstance(turn, bool) and context and context.session_id:
        turn_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"agents-runner:{session_id}/turn/{turn}"))
    call = LlmToolCall(
        id=(context.call_id if context and context.call_id else request.id),
        function=FunctionCall(
            name=request.tool.name, arguments=wire.dumps(request.arguments).decode("utf-8")
        ),
    )
    snapshot = ContextSnapshot(session_id=session_id, conversation_id=session_id, turn_id=turn_id)
    return IsolationEnvelope(
        token=request.id, tool_call=call, context_snapshot=snapshot, policy=policy, reason=reason
    )


def encode_request(request: ToolCallRequest, default_policy: dict[str, Any]) -> bytes:
    """agents-exe's request for `request`, as the one compact JSON line its workers read."""
    return wire.dumps(isolation_envelope(request, default_policy).to_wire())


def decode_result(data: bytes, request: ToolCallRequest) -> ToolCallResult:
    """An agents-exe worker's answer to `request` as a v1 result: `success` is an ok
    result with the UserToolResponse as its output, `error` an ERROR_CODE error with the
    worker's text. MalformedOutput for anything else, checked as strictly as v1 (one
    bounded JSON object, no duplicate keys, the request's token, no unknown fields)."""
    try:
        doc = wire.loads(data, max_bytes=request.limits.max_result_bytes)
    except wire.WireError as exc:
        raise MalformedOutput(f"agents-exe result envelope: {exc}") from None
    if "token" not in doc:
        raise MalformedOutput("agents-exe result envelope: token: missing (echo the request's)")
    token = doc["token"]
    if not isinstance(token, str):
        raise MalformedOutput(f"token: expected a string, got {type(token).__name__}")
    if token != request.id:
        raise MalformedOutput(f"token: expected the request's {request.id!r}, got {token[:64]!r}")
    unknown = sorted(set(doc) - set(_RESULT_FIELDS))
    if unknown:
        raise MalformedOutput(
            f"agents-exe result envelope: unknown field {unknown[0][:40]!r}"
            f" (it has {', '.join(_RESULT_FIELDS)})"
        )
    try:
        envelope = IsolationResultEnvelope.model_validate(doc)
    except ValidationError as exc:
        raise MalformedOutput(
            f"invalid agents-exe result envelope: {describe_validation_error(exc)}"
        ) from None
    if envelope.status == "error":
        if envelope.result is not None:
            raise MalformedOutput("status 'error' must not carry a result")
        message = envelope.error or "the worker reported an error without a message"
        return ToolCallResult.fail(request.id, ERROR_CODE, message, False, request.version)
    if envelope.error is not None:
        raise MalformedOutput("status 'success' must not carry an error")
    if envelope.result is None:
        raise MalformedOutput("status 'success' needs a result (a UserToolResponse)")
    try:
        output = parse_user_tool_response(envelope.result)
    except UserToolResponseError as exc:
        raise MalformedOutput(str(exc)) from None
    except ValidationError as exc:
        raise MalformedOutput(f"result: {describe_validation_error(exc)}") from None
    return ToolCallResult.ok(request.id, output, request.version)
