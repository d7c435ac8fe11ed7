"""Bytes to envelopes and back, for both sides of the pipe.

A worker decodes requests with `decode_request`; a runner decodes what the worker sent
with `decode_result` / `decode_describe_result`. Each raises one exception type whose
message names what was wrong and where, ready to put in an error envelope.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
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

_REQUEST_KINDS: Mapping[str, type[ToolCallRequest] | type[DescribeRequest]] = MappingProxyType(
    {"ToolCallRequest": ToolCallRequest, "DescribeRequest": DescribeRequest}
)


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


Loc = tuple[str | int, ...]


def _join(loc: Loc) -> str:
    return ".".join(str(p) for p in loc) or "(document)"


def describe_validation_error(
    exc: ValidationError,
    limit: int = 3,
    model: type[BaseModel] | None = None,
    path: Callable[[Loc], str] = _join,
) -> str:
    """`field.path: problem` for the first few errors, in one line. With the `model`
    validated, a field refused as extra that is a known field one level up, or of a
    sibling, says where it belongs (`path` writes a location as the reader knows it)."""
    parts = []
    for error in exc.errors()[:limit]:
        loc = tuple(error["loc"])
        text = f"{path(loc)}: {error['msg']}"
        if model is not None and error["type"] == "extra_forbidden" and loc:
            found = where_field_belongs(model, loc)
            if found is not None:
                owner, label = found
                place = f"on {path(owner)} ({label})" if owner else f"at the top level ({label})"
                text += f"; `{loc[-1]}` belongs {place}, not here"
        parts.append(text)
    more = len(exc.errors()) - limit
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation may hold: through Annotated, unions, lists and dicts."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _models_in(args[0])
    if origin is Literal:
        return []
    found: list[type[BaseModel]] = []
    for arg in args:  # a union's members, or a container's items (dict: keys and values)
        found += [m for m in _models_in(arg) if m not in found]
    return found


def _names(model: type[BaseModel]) -> dict[str, str]:
    """Each name a document may give a field of `model` (its alias, or its own name),
    mapped to the name the document should use."""
    names = {}
    for name, info in model.model_fields.items():
        shown = info.alias or name
        names[name] = names[shown] = shown
    return names


def _branch_names(model: type[BaseModel]) -> set[str]:
    """What pydantic may put in a location for `model` as one branch of a union: its
    tag's values (a Literal field with a default), or its class name."""
    found = {model.__name__}
    for info in model.model_fields.values():
        if typing.get_origin(info.annotation) is Literal and info.default is not None:
            found.update(str(v) for v in typing.get_args(info.annotation))
    return found


def _label(model: type[BaseModel]) -> str:
    for info in model.model_fields.values():
        if typing.get_origin(info.annotation) is Literal and isinstance(info.default, str):
            return info.default
    return model.__name__


def where_field_belongs(model: type[BaseModel], loc: Sequence[str | int]) -> tuple[Loc, str] | None:
    """For an extra field at `loc` in a document of `model`: the location of the object
    where a field of that name is known (nearest first: the parent objects, then the
    siblings' objects), with that object's tag or model name; None if nowhere near."""
    *route, extra = loc
    if not isinstance(extra, str):
        return None
    frames: list[tuple[Loc, list[type[BaseModel]]]] = [((), [model])]
    for index, part in enumerate(route):
        here = tuple(route[: index + 1])
        models = frames[-1][1]
        key = str(part) if isinstance(part, str) else None
        branch = [m for m in models if key is not None and key in _branch_names(m)]
        owners = [m for m in models if key is not None and key in _names(m)]
        if owners and key is not None:
            field = owners[0].model_fields.get(key) or next(
                info for info in owners[0].model_fields.values() if info.alias == key
            )
            frames.append((here, _models_in(field.annotation)))
        elif branch:
            frames[-1] = (here, branch)  # a union's branch: the same object, narrowed
        else:
            frames[-1] = (here, models)  # a list index or a dict key: the same models
    inner_prefix, inner = frames.pop()  # the object the field was refused in
    for prefix, models in reversed(frames):
        for owner in models:
            if extra in _names(owner):
                return prefix, _label(owner)
    # Then one level down: a field of this object's own objects, or of its siblings'.
    for prefix, models in ((inner_prefix, inner), frames[-1] if frames else ((), [])):
        for model_ in models:
            for name, info in model_.model_fields.items():
                for child in _models_in(info.annotation):
                    if child not in inner and extra in _names(child):
                        return (*prefix, info.alias or name), _label(child)
    return None


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
    model = _REQUEST_KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
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
        request = model.model_validate(doc)
    except ValidationError as exc:
        raise RequestError(
            "INVALID_REQUEST",
            f"invalid {kind}: {describe_validation_error(exc, model=model)}",
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
        why = describe_validation_error(exc, model=ToolCallResult)
        raise MalformedOutput(f"invalid ToolCallResult: {why}") from None
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
        why = describe_validation_error(exc, model=DescribeResult)
        raise MalformedOutput(f"invalid DescribeResult: {why}") from None


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
