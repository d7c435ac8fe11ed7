"""agents-exe's UserToolResponse: the result shape its users write by hand.

agents-exe hands a tool result around as a UserToolResponse:
`{"type": "text", "content": str}`, `{"type": "json", "content": any}`,
`{"type": "media", "mimeType", "base64Data", "filename"?}` or
`{"type": "mixed", "parts": [...]}` (parts: `{"type": "text", "text"}` or media).
`parse_user_tool_response` reads one, in agents-exe's camelCase or the v1 envelope's
snake_case (`mime_type`, `base64_data`, and `content` for a text part), into the v1
`Output` it means, with the v1 bounds (MIME type, base64, filename, part count) checked.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from envelopes.v1 import MAX_PARTS, JsonOutput, MediaOutput, MixedOutput, Output, TextOutput

#: The `type` values of a UserToolResponse.
RESPONSE_TYPES = ("text", "json", "media", "mixed")
_OUTPUT: TypeAdapter[TextOutput | JsonOutput | MediaOutput | MixedOutput] = TypeAdapter(Output)
_MEDIA_NAMES = {"mimeType": "mime_type", "base64Data": "base64_data"}


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
            ' (to send an arbitrary object as a JSON result, wrap it:'
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
