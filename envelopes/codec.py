"""Bytes to envelopes and back, for both sides of the pipe.

A worker decodes requests with `decode_request`; a runner decodes what the worker sent
with `decode_result` / `decode_describe_result`. Each raises one exception type whose
message names what was wrong and where, ready to put in an error envelope.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from envelopes import wire
from envelopes.v1 import (
    ID_PATTERN,
    MAX_REQUEST_BYTES,
    SUPPORTED_VERSIONS,
    VERSION,
    DescribeRequest,
    DescribeResult,
    ToolCallRequest,
    ToolCallResult,
    highest_version,
    runner_only_problem,
    version_tuple,
)

_REQUEST_KINDS: dict[str, type[ToolCallRequest] | type[DescribeRequest]] = {
    "ToolCallRequest": ToolCallRequest,
    "DescribeRequest": DescribeRequest,
}


_ID_RE = re.compile(ID_PATTERN)


class RequestError(Exception):
    """A request a worker must refuse; `code` is INVALID_REQUEST or UNSUPPORTED_VERSION."""

    def __init__(
        self,
        code: Literal["INVALID_REQUEST", "UNSUPPORTED_VERSION"],
        message: str,
        request_id: str | None = None,
        version: str = VERSION,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id
        #: The version the refusal is written in (section 8): the request's when the
        #: worker speaks it, else the worker's highest.
        self.version = version


class MalformedOutput(Exception):
    """What a worker sent back is not an acceptable result; the reason says why."""


def describe_validation_error(exc: ValidationError, limit: int = 3) -> str:
    """`field.path: problem` for the first few errors, in one line."""
    parts = []
    for error in exc.errors()[:limit]:
        where = ".".join(str(p) for p in error["loc"]) or "(document)"
        parts.append(f"{where}: {error['msg']}")
    more = len(exc.errors()) - limit
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def _echo_id(data: dict[str, Any]) -> str | None:
    value = data.get("id")
    if isinstance(value, str) and _ID_RE.fullmatch(value):
        return value
    return None


def decode_request(
    data: bytes,
    supported_versions: tuple[str, ...] = SUPPORTED_VERSIONS,
    understood_extensions: frozenset[str] = frozenset(),
) -> ToolCallRequest | DescribeRequest:
    """Parse a request as a worker must (section 8.1): acceptable JSON, then `kind`, then
    `version` (its grammar, then whether it is spoken), then the rest, `critical` last
    (section 3.1: a worker implements the extensions in `understood_extensions`)."""
    highest = highest_version(supported_versions)
    try:
        doc = wire.loads(data, max_bytes=MAX_REQUEST_BYTES)
    except wire.WireError as exc:
        raise RequestError(
            "INVALID_REQUEST", f"request is not acceptable JSON: {exc}", None, highest
        ) from None
    request_id = _echo_id(doc)
    kind = doc.get("kind")
    if kind not in _REQUEST_KINDS:
        raise RequestError(
            "INVALID_REQUEST",
            f"kind: expected one of {sorted(_REQUEST_KINDS)}, got {kind!r}",
            request_id,
            highest,
        )
    version = doc.get("version")
    if version_tuple(version) is None:
        raise RequestError(
            "INVALID_REQUEST",
            "version: missing or not a string of the form major.minor (no leading zeros)",
            request_id,
            highest,
        )
    assert isinstance(version, str)
    if version not in supported_versions:
        raise RequestError(
            "UNSUPPORTED_VERSION",
            f"version {version!r} is not supported; supported versions: "
            + ", ".join(supported_versions),
            request_id,
            highest,
        )
    try:
        request = _REQUEST_KINDS[kind].model_validate(doc)
    except ValidationError as exc:
        raise RequestError(
            "INVALID_REQUEST",
            f"invalid {kind}: {describe_validation_error(exc)}",
            request_id,
            version,
        ) from None
    problem = (
        request.critical_problem(understood_extensions)
        if isinstance(request, ToolCallRequest)
        else None
    )
    if problem is not None:
        raise RequestError("INVALID_REQUEST", problem, request_id, version)
    return request


def _is_unsupported_version_answer(doc: dict[str, Any]) -> bool:
    error = doc.get("error")
    return (
        doc.get("status") == "error"
        and isinstance(error, dict)
        and error.get("code") == "UNSUPPORTED_VERSION"
        and version_tuple(doc.get("version")) is not None
    )


def decode_result(data: bytes, request: ToolCallRequest) -> ToolCallResult:
    """Parse and check a worker's answer to `request`; raise MalformedOutput otherwise.
    Its `version` echoes the request's, except in an UNSUPPORTED_VERSION answer, which
    carries the worker's highest version (section 8)."""
    doc = _load_outbound(data, request.limits.max_result_bytes, "ToolCallResult")
    if doc.get("version") != request.version and not _is_unsupported_version_answer(doc):
        raise MalformedOutput(
            f"version: expected the request's {request.version!r}, got {doc.get('version')!r}"
        )
    try:
        result = ToolCallResult.model_validate(doc)
    except ValidationError as exc:
        raise MalformedOutput(f"invalid ToolCallResult: {describe_validation_error(exc)}") from None
    if result.id != request.id:
        raise MalformedOutput(f"id: expected the request's {request.id!r}, got {result.id!r}")
    problem = runner_only_problem(result)  # a runner code, or 1.1's error.output_tail
    if problem is not None:
        raise MalformedOutput(problem)
    return result


def decode_describe_result(data: bytes, max_bytes: int) -> DescribeResult:
    doc = _load_outbound(data, max_bytes, "DescribeResult")
    if not isinstance(doc.get("version"), str):
        raise MalformedOutput("version: missing or not a string")
    try:
        return DescribeResult.model_validate(doc)
    except ValidationError as exc:
        raise MalformedOutput(f"invalid DescribeResult: {describe_validation_error(exc)}") from None


def _load_outbound(data: bytes, max_bytes: int, kind: str) -> dict[str, Any]:
    try:
        doc = wire.loads(data, max_bytes=max_bytes)
    except wire.WireError as exc:
        raise MalformedOutput(str(exc)) from None
    if doc.get("kind") != kind:
        raise MalformedOutput(f"kind: expected {kind!r}, got {doc.get('kind')!r}")
    return doc


def encode(envelope: BaseModel) -> bytes:
    """One envelope as wire bytes (compact UTF-8 JSON, no trailing newline)."""
    return wire.dumps(envelope.model_dump(mode="json"))
