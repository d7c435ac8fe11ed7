"""Version 1 of the envelope: the models, the error codes and the bounds.

These pydantic models are the single source of the contract. The JSON Schema files in
`envelopes/schemas/<version>/` are generated from them by `scripts/gen-schemas` and a test
keeps the two identical. One model per document serves 1.0 and 1.1: 1.1 only adds optional
members (files, collect and events in a request; a media part's path, the runner-only
error.output_tail and describe's capabilities in what a worker sends back).

Two directions, two rules:
- what the runner sends a worker (ToolCallRequest, DescribeRequest) follows must-ignore:
  unknown fields are ignored, so a later 1.x can add optional fields;
- what a worker sends back (ToolCallResult, DescribeResult) is closed and bounded:
  unknown fields, unbounded strings and unexpected types are refused.
The same two rules hold for a 1.1 member in a document whose version is 1.0: a request
model ignores it (as a 1.0 worker would), a result or describe model refuses it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    model_serializer,
    model_validator,
)

from envelopes import files, rules

# The bounds of 1.1's members, used below (import them from envelopes.rules).
from envelopes.rules import (
    BASE64_PADDED_PATTERN,
    CAPABILITY_PATTERN,
    COLLECT_DEFAULT_MAX_BYTES,
    COLLECT_DEFAULT_MAX_FILES,
    COLLECT_MAX_BYTES_CEILING,
    COLLECT_MAX_FILES_CEILING,
    COLLECT_MAX_PATTERNS,
    CRITICAL_MEMBER_PATTERN,
    EVENT_MESSAGE_MAX,
    EVENT_TEXT_MAX,
    EVENTS_DEFAULT_MAX_BYTES,
    EVENTS_DEFAULT_MAX_PER_SECOND,
    EVENTS_MAX_BYTES_CEILING,
    EVENTS_MAX_PER_SECOND_CEILING,
    FILE_MODE_DEFAULT,
    FILE_MODE_MAX,
    FILES_MAX_BYTES,
    FILES_MAX_COUNT,
    GLOB_PATTERN,
    MAX_CAPABILITIES,
    MAX_CRITICAL,
    MAX_PATH_BYTES,
    OUTPUT_TAIL_MAX,
    PATH_DOT_COMPONENT_PATTERN,
    PATH_LINE_TERMINATOR_PATTERN,
    PATH_LONG_COMPONENT_PATTERN,
    PATH_MULTIBYTE_COMPONENT_PATTERNS,
    PATH_PATTERN,
)

# The version, bounds and patterns live in envelopes.rules (standard library only, for
# workers that check requests without pydantic); re-exported here as part of v1.
from envelopes.rules import (
    BASE64_PATTERN as BASE64_PATTERN,
)
from envelopes.rules import (
    DEFAULT_MAX_RESULT_BYTES as DEFAULT_MAX_RESULT_BYTES,
)
from envelopes.rules import (
    EXTENSION_KEY_PATTERN as EXTENSION_KEY_PATTERN,
)
from envelopes.rules import (
    FILENAME_PATTERN as FILENAME_PATTERN,
)
from envelopes.rules import (
    ID_PATTERN as ID_PATTERN,
)
from envelopes.rules import (
    LATEST_VERSION as LATEST_VERSION,
)
from envelopes.rules import (
    MAJOR as MAJOR,
)
from envelopes.rules import (
    MAX_EXTENSIONS as MAX_EXTENSIONS,
)
from envelopes.rules import (
    MAX_ITEMS as MAX_ITEMS,
)
from envelopes.rules import (
    MAX_KEY as MAX_KEY,
)
from envelopes.rules import (
    MAX_MESSAGE as MAX_MESSAGE,
)
from envelopes.rules import (
    MAX_PARTS as MAX_PARTS,
)
from envelopes.rules import (
    MAX_PROPERTIES as MAX_PROPERTIES,
)
from envelopes.rules import (
    MAX_REQUEST_BYTES as MAX_REQUEST_BYTES,
)
from envelopes.rules import (
    MAX_RESULT_BYTES_CEILING as MAX_RESULT_BYTES_CEILING,
)
from envelopes.rules import (
    MAX_STRING as MAX_STRING,
)
from envelopes.rules import (
    MAX_TOOLS as MAX_TOOLS,
)
from envelopes.rules import (
    MIME_PATTERN as MIME_PATTERN,
)
from envelopes.rules import (
    RESERVED_ID as RESERVED_ID,
)
from envelopes.rules import (
    SUPPORTED_VERSIONS as SUPPORTED_VERSIONS,
)
from envelopes.rules import (
    TOOL_NAME_PATTERN as TOOL_NAME_PATTERN,
)
from envelopes.rules import (
    VERSION as VERSION,
)
from envelopes.rules import (
    VERSION_PATTERN as VERSION_PATTERN,
)
from envelopes.rules import (
    WORKER_VERSION_PATTERN as WORKER_VERSION_PATTERN,
)
from envelopes.wire import MAX_SAFE_INTEGER

SCHEMA_BASE_ID = "https://agents-runner.dev/schemas/envelope"

# --- error codes ---------------------------------------------------------------------

#: Codes a worker may send.
WorkerErrorCode = Literal[
    "UNSUPPORTED_VERSION",
    "INVALID_REQUEST",
    "UNKNOWN_TOOL",
    "INVALID_ARGUMENTS",
    "PERMISSION_DENIED",
    "TOOL_FAILED",
    "LIMIT_EXCEEDED",
    "DEADLINE_EXCEEDED",
    "UNAVAILABLE",
    "INTERNAL",
]
#: Codes only the runner produces; a worker that sends one gets MALFORMED_OUTPUT.
RunnerErrorCode = Literal[
    "WORKER_START_FAILED",
    "WORKER_TIMEOUT",
    "WORKER_CRASHED",
    "WORKER_OOM",
    "MALFORMED_OUTPUT",
    "OUTPUT_TOO_LARGE",
    "CANCELLED",
]
#: Every code an error result may carry (nested Literals flatten into one).
ErrorCode = Literal[WorkerErrorCode, RunnerErrorCode]

WORKER_ERROR_CODES: tuple[WorkerErrorCode, ...] = get_args(WorkerErrorCode)
RUNNER_ERROR_CODES: tuple[RunnerErrorCode, ...] = get_args(RunnerErrorCode)
ERROR_CODES: tuple[ErrorCode, ...] = WORKER_ERROR_CODES + RUNNER_ERROR_CODES
#: The binding `retryable` column of section 5: whether a retry of the same request can
#: help, by code; None for the one code where the worker decides (TOOL_FAILED). A runner
#: replaces a worker's `retryable` by this value (`binding_retryable`), so a worker can
#: neither make INVALID_ARGUMENTS retried nor a DEADLINE_EXCEEDED final. A timeout or a
#: crash may be transient; a memory or output overflow, bad output or a cancellation will
#: happen again.
CODE_RETRYABLE: Mapping[ErrorCode, bool | None] = MappingProxyType(
    {
        "UNSUPPORTED_VERSION": False,
        "INVALID_REQUEST": False,
        "UNKNOWN_TOOL": False,
        "INVALID_ARGUMENTS": False,
        "PERMISSION_DENIED": False,
        "TOOL_FAILED": None,
        "LIMIT_EXCEEDED": False,
        "DEADLINE_EXCEEDED": True,
        "UNAVAILABLE": True,
        "INTERNAL": False,
        "WORKER_START_FAILED": False,
        "WORKER_TIMEOUT": True,
        "WORKER_CRASHED": True,
        "WORKER_OOM": False,
        "MALFORMED_OUTPUT": False,
        "OUTPUT_TOO_LARGE": False,
        "CANCELLED": False,
    }
)
#: The same column for the codes the runner synthesizes (none of them is None).
RUNNER_CODE_RETRYABLE: Mapping[RunnerErrorCode, bool] = MappingProxyType(
    {code: bool(CODE_RETRYABLE[code]) for code in get_args(RunnerErrorCode)}
)


def binding_retryable(code: str, retryable: bool) -> bool:
    """`retryable` as section 5's column binds it for `code`: the column's value, or the
    given one where the worker decides (TOOL_FAILED) or the code is not an envelope's."""
    fixed = CODE_RETRYABLE.get(code)  # type: ignore[call-overload]
    return retryable if fixed is None else fixed


Effects = Literal["none", "contained", "external"]


# --- bounded JSON values -------------------------------------------------------------

#: Stands for `{"$ref": "#/$defs/JsonValue"}` until envelopes.schema adds the definition
#: (pydantic refuses references to definitions it did not make itself).
JSON_VALUE_MARKER = "x-agents-runner-json-value"


def _json_value_schema() -> dict[str, Any]:
    """The marker that stands for a JsonValue (a new dict each time: pydantic keeps and
    may edit what it is given)."""
    return {JSON_VALUE_MARKER: True}


def json_value_def() -> dict[str, Any]:
    """The schema definition of a JsonValue (a new dict each time, for the caller to own)."""
    return {
        "description": "Any JSON value, with every string, array and object bounded.",
        "anyOf": [
            {"type": "null"},
            {"type": "boolean"},
            {"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER},
            {"type": "number"},
            {"type": "string", "maxLength": MAX_STRING},
            {"type": "array", "maxItems": MAX_ITEMS, "items": _json_value_schema()},
            {
                "type": "object",
                "maxProperties": MAX_PROPERTIES,
                "propertyNames": {"maxLength": MAX_KEY},
                "additionalProperties": _json_value_schema(),
            },
        ],
    }


def _check_json_bounds(value: Any) -> Any:
    """Enforce in Python exactly the bounds json_value_def() states in the schema."""
    problem = rules.json_bounds_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


JsonValue = Annotated[Any, AfterValidator(_check_json_bounds), WithJsonSchema(_json_value_schema())]
JsonObject = Annotated[
    dict[str, Any],
    AfterValidator(_check_json_bounds),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": MAX_PROPERTIES,
            "propertyNames": {"maxLength": MAX_KEY},
            "additionalProperties": _json_value_schema(),
        }
    ),
]

Id = Annotated[str, Field(pattern=ID_PATTERN, max_length=rules.ID.longest)]
ToolName = Annotated[str, Field(pattern=TOOL_NAME_PATTERN, max_length=rules.TOOL_NAME.longest)]
Version = Annotated[str, Field(pattern=VERSION_PATTERN, max_length=rules.MAX_VERSION_LENGTH)]
SafeInt = Annotated[int, Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]


# --- versions, and the fields 1.1 adds -----------------------------------------------

V1_1 = "1.1"
#: Marks, in a generated schema, a property added after 1.0; envelopes.schema drops it
#: from the schemas of earlier versions and removes the marker from the others.
SINCE_MARKER = "x-agents-runner-since"


def _since(version: str) -> dict[str, Any]:
    return {SINCE_MARKER: version}


version_tuple = rules.version_tuple
version_at_least = rules.version_at_least


def highest_version(versions: tuple[str, ...] | list[str]) -> str:
    """The highest of `versions` (`major.minor` strings), compared as numbers."""
    return max(versions, key=lambda v: version_tuple(v) or (-1, -1))


# --- 1.1 paths: input files, collect patterns, media paths ----------------------------


def _checked_path(value: str) -> str:
    problem = rules.path_problem(value)
    if problem is not None:
        raise ValueError(f"path {problem}")
    return value


def _checked_glob(value: str) -> str:
    problem = rules.glob_problem(value)
    if problem is not None:
        raise ValueError(f"pattern {problem}")
    return value


def path_key(path: str) -> str:
    """What two paths are compared by for duplicates: Unicode case folding, then NFC, so
    names that collide on a case-insensitive or normalizing file system collide here.
    The workers' rule (envelopes.files.fold), so both sides find the same duplicates."""
    return files.fold(path)


def _path_schema(pattern: str) -> dict[str, Any]:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_PATH_BYTES,
        "pattern": pattern,
        "not": {
            "anyOf": [
                {"pattern": PATH_DOT_COMPONENT_PATTERN},
                {"pattern": PATH_LONG_COMPONENT_PATTERN},
                *({"pattern": p} for p in PATH_MULTIBYTE_COMPONENT_PATTERNS),
                {"pattern": PATH_LINE_TERMINATOR_PATTERN},
            ]
        },
    }


#: A relative path under the path rules. The schema bounds characters; the model holds
#: the path and each component to their bounds in bytes of UTF-8.
RelativePath = Annotated[
    str, AfterValidator(_checked_path), WithJsonSchema(_path_schema(PATH_PATTERN))
]
GlobPattern = Annotated[
    str, AfterValidator(_checked_glob), WithJsonSchema(_path_schema(GLOB_PATTERN))
]


is_padded_base64 = rules.is_padded_base64
base64_decoded_size = rules.base64_decoded_size


def _checked_padded_base64(value: str) -> str:
    problem = rules.base64_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# --- base classes --------------------------------------------------------------------


class _Envelope(BaseModel):
    """Shared behaviour: optional fields left unset are omitted on the wire."""

    @model_serializer(mode="wrap")
    def _omit_unset_optionals(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name, field in type(self).model_fields.items():
            if not field.is_required() and field.default is None and data.get(name) is None:
                data.pop(name, None)
        return data

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict that goes on the wire."""
        return self.model_dump(mode="json")


class Inbound(_Envelope):
    """Sent to a worker: unknown fields are ignored (must-ignore), values are strict."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class Outbound(_Envelope):
    """Sent back by a worker: closed, strict and bounded."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- request -------------------------------------------------------------------------


class ToolRef(Inbound):
    name: ToolName


class RequestLimits(Inbound):
    max_result_bytes: Annotated[int, Field(ge=1, le=MAX_RESULT_BYTES_CEILING)] = Field(
        description="Largest result document, in bytes of UTF-8, the runner will read."
    )


class CallContext(Inbound):
    """Where the call comes from; lets a worker with external effects deduplicate."""

    session_id: Annotated[str, Field(max_length=rules.MAX_CONTEXT_ID)] | None = None
    call_id: Annotated[str, Field(max_length=rules.MAX_CONTEXT_ID)] | None = None
    attempt: Annotated[int, Field(ge=1, le=rules.MAX_ATTEMPT)] | None = None
    idempotency_key: Annotated[str, Field(max_length=rules.MAX_IDEMPOTENCY_KEY)] | None = None


def _input_file_schema_extra(schema: dict[str, Any]) -> None:
    # The content of a base64 file is strict base64 (the model checks it the same way).
    schema["if"] = {"properties": {"encoding": {"const": "base64"}}, "required": ["encoding"]}
    schema["then"] = {"properties": {"content": {"pattern": BASE64_PADDED_PATTERN}}}


class InputFile(Inbound):
    """1.1: one file the worker writes under the call's workspace before the tool runs."""

    model_config = ConfigDict(json_schema_extra=_input_file_schema_extra)

    path: RelativePath
    # No file can be longer than the request that carries it.
    content: Annotated[str, Field(max_length=MAX_REQUEST_BYTES)]
    encoding: Literal["utf-8", "base64"] = "utf-8"
    mode: Annotated[int, Field(ge=0, le=FILE_MODE_MAX)] = Field(
        default=FILE_MODE_DEFAULT, description="Permission bits, 0 to 0o777 (420 = 0o644)."
    )

    @model_validator(mode="after")
    def _content_decodes(self) -> InputFile:
        # (A lone surrogate in utf-8 content is already refused by pydantic's str check.)
        problem = rules.base64_problem(self.content) if self.encoding == "base64" else None
        if problem is not None:
            raise ValueError(f"content: {problem}")
        return self

    @property
    def size(self) -> int:
        """Bytes the content decodes to."""
        if self.encoding == "base64":
            return base64_decoded_size(self.content)
        return len(self.content.encode("utf-8"))

    def data(self) -> bytes:
        """The file's bytes."""
        if self.encoding == "base64":
            import base64

            return base64.b64decode(self.content, validate=True)
        return self.content.encode("utf-8")


def _check_input_files(files: list[InputFile]) -> list[InputFile]:
    """The rules between files: no duplicates, no file inside another, total bytes."""
    seen: dict[str, int] = {}
    for index, file in enumerate(files):
        key = path_key(file.path)
        if key in seen:
            how = "equal" if files[seen[key]].path == file.path else "equal ignoring case and NFC"
            raise ValueError(f"files[{index}].path duplicates files[{seen[key]}].path ({how})")
        seen[key] = index
    for index, file in enumerate(files):
        key = path_key(file.path)
        for cut in range(len(key)):
            if key[cut] == "/" and key[:cut] in seen:
                raise ValueError(
                    f"files[{index}].path is inside files[{seen[key[:cut]]}].path, which is a file"
                )
    total = sum(file.size for file in files)
    if total > FILES_MAX_BYTES:
        raise ValueError(f"files: {total} bytes decoded in total, over {FILES_MAX_BYTES}")
    return files


InputFiles = Annotated[
    list[InputFile], Field(max_length=FILES_MAX_COUNT), AfterValidator(_check_input_files)
]


class Collect(Inbound):
    """1.1: files the worker gathers from its workspace after the tool ran."""

    patterns: Annotated[list[GlobPattern], Field(min_length=1, max_length=COLLECT_MAX_PATTERNS)]
    max_files: Annotated[int, Field(ge=1, le=COLLECT_MAX_FILES_CEILING)] = COLLECT_DEFAULT_MAX_FILES
    max_bytes: Annotated[int, Field(ge=1, le=COLLECT_MAX_BYTES_CEILING)] = COLLECT_DEFAULT_MAX_BYTES


class EventBudget(Inbound):
    """1.1: the runner reads events on stderr; the worker keeps to this budget."""

    max_per_second: Annotated[int, Field(ge=1, le=EVENTS_MAX_PER_SECOND_CEILING)] = (
        EVENTS_DEFAULT_MAX_PER_SECOND
    )
    max_bytes: Annotated[int, Field(ge=1, le=EVENTS_MAX_BYTES_CEILING)] = Field(
        default=EVENTS_DEFAULT_MAX_BYTES, description="Total bytes of event lines."
    )


#: The request members 1.1 adds; in a request whose version is 1.0 they are ignored.
REQUEST_FIELDS_1_1: tuple[str, ...] = ("files", "collect", "events", "critical")


def _checked_critical(names: list[str]) -> list[str]:
    if len(set(names)) != len(names):
        raise ValueError("critical: each name may appear once")
    for index, name in enumerate(names):
        if not rules.is_critical_name(name):
            raise ValueError(f"critical[{index}]: neither a member name nor an extension key")
    return names


Critical = Annotated[
    list[str],
    Field(max_length=MAX_CRITICAL),
    AfterValidator(_checked_critical),
    WithJsonSchema(
        {
            "type": "array",
            "maxItems": MAX_CRITICAL,
            "uniqueItems": True,
            "items": {
                "type": "string",
                "maxLength": MAX_KEY,
                "anyOf": [
                    {"pattern": CRITICAL_MEMBER_PATTERN},
                    {"pattern": EXTENSION_KEY_PATTERN},
                ],
            },
        }
    ),
]


class ToolCallRequest(Inbound):
    kind: Literal["ToolCallRequest"] = "ToolCallRequest"
    version: Version = VERSION
    id: Id = Field(description="Call identifier (the continuation token); echoed in the result.")
    tool: ToolRef
    arguments: JsonObject
    deadline_ms: Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER)] = Field(
        description="Absolute deadline, milliseconds since the Unix epoch."
    )
    limits: RequestLimits
    context: CallContext | None = None
    extensions: (
        Annotated[
            dict[
                Annotated[str, Field(pattern=EXTENSION_KEY_PATTERN, max_length=MAX_KEY)], JsonValue
            ],
            Field(max_length=MAX_EXTENSIONS),
            # Every key namespaced, as the model says (propertyNames, not patternProperties:
            # so the key's pattern also gets the schemas' line-terminator rule).
            WithJsonSchema(
                {
                    "type": "object",
                    "maxProperties": MAX_EXTENSIONS,
                    "propertyNames": {"maxLength": MAX_KEY, "pattern": EXTENSION_KEY_PATTERN},
                    "additionalProperties": _json_value_schema(),
                }
            ),
        ]
        | None
    ) = Field(default=None, description="Namespaced keys (`vendor/key`); ignored when unknown.")
    files: InputFiles | None = Field(
        default=None,
        description="1.1: files written under the call's workspace before the tool runs.",
        json_schema_extra=_since(V1_1),
    )
    collect: Collect | None = Field(
        default=None,
        description="1.1: workspace files returned as media parts after the tool ran.",
        json_schema_extra=_since(V1_1),
    )
    events: EventBudget | None = Field(
        default=None,
        description="1.1: present when the runner reads events on stderr.",
        json_schema_extra=_since(V1_1),
    )
    critical: Critical | None = Field(
        default=None,
        description="1.1: members (or extension keys) present in this request that a"
        " worker must implement, or refuse the request (INVALID_REQUEST).",
        json_schema_extra=_since(V1_1),
    )

    @model_validator(mode="after")
    def _critical_members_are_present(self) -> ToolCallRequest:
        # A member these models do not know is dropped (must-ignore), so its presence is
        # not checked here: critical_problem refuses it as not implemented.
        fields = type(self).model_fields
        for index, name in enumerate(self.critical or ()):
            if "/" in name:
                present = name in (self.extensions or {})
            else:
                present = name not in fields or getattr(self, name) is not None
            if not present:
                raise ValueError(f"critical[{index}]: {name!r} is not in the request")
        return self

    def critical_problem(self, understood_extensions: frozenset[str] = frozenset()) -> str | None:
        """Why a worker on these models must refuse this request (section 3.1): a name in
        `critical` it does not implement (a member these models do not know, or an
        extension key not in `understood_extensions`), or None."""
        for index, name in enumerate(self.critical or ()):
            known = (
                name in understood_extensions if "/" in name else name in type(self).model_fields
            )
            if not known:
                return f"critical[{index}]: {name!r} is not implemented by this worker"
        return None

    @model_validator(mode="before")
    @classmethod
    def _fields_of_its_version(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        newer = [name for name in REQUEST_FIELDS_1_1 if data.get(name) is not None]
        if not newer:
            return data
        if "version" not in data:  # built in Python with 1.1 fields: a 1.1 request
            return {**data, "version": V1_1}
        if not version_at_least(data["version"], V1_1):  # must-ignore, as a 1.0 worker does
            return {k: v for k, v in data.items() if k not in REQUEST_FIELDS_1_1}
        return data


class DescribeRequest(Inbound):
    kind: Literal["DescribeRequest"] = "DescribeRequest"
    version: Version = VERSION


# --- result --------------------------------------------------------------------------


class TextOutput(Outbound):
    type: Literal["text"] = "text"
    content: Annotated[str, Field(max_length=MAX_STRING)]


class JsonOutput(Outbound):
    type: Literal["json"] = "json"
    content: JsonValue


class MediaOutput(Outbound):
    type: Literal["media"] = "media"
    mime_type: Annotated[str, Field(pattern=MIME_PATTERN, max_length=rules.MAX_MIME_LENGTH)]
    # Padded, as section 4.1 says (the schema's pattern and is_padded_base64 agree).
    base64_data: Annotated[
        str,
        Field(max_length=MAX_STRING),
        AfterValidator(_checked_padded_base64),
        WithJsonSchema(
            {"type": "string", "maxLength": MAX_STRING, "pattern": BASE64_PADDED_PATTERN}
        ),
    ]
    filename: (
        Annotated[str, Field(pattern=FILENAME_PATTERN, max_length=rules.FILENAME.longest)] | None
    ) = None
    path: RelativePath | None = Field(
        default=None,
        description="1.1: the file's path relative to the workspace (path rules).",
        json_schema_extra=_since(V1_1),
    )


class MixedOutput(Outbound):
    type: Literal["mixed"] = "mixed"
    parts: Annotated[list[Output], Field(max_length=MAX_PARTS)]


Output = Annotated[TextOutput | JsonOutput | MediaOutput | MixedOutput, Field(discriminator="type")]
MixedOutput.model_rebuild()


class ErrorInfo(Outbound):
    code: ErrorCode
    message: Annotated[str, Field(max_length=MAX_MESSAGE)]
    retryable: bool
    output_tail: Annotated[str, Field(max_length=OUTPUT_TAIL_MAX)] | None = Field(
        default=None,
        description="1.1, runner-only: the end of the text the worker streamed before it"
        " was ended (WORKER_TIMEOUT, WORKER_OOM, WORKER_CRASHED).",
        json_schema_extra=_since(V1_1),
    )


def media_parts(
    output: TextOutput | JsonOutput | MediaOutput | MixedOutput | None, where: str = "output"
) -> Iterator[tuple[str, MediaOutput]]:
    """Every media part of `output`, depth first, with its location (`output.parts[3]`)."""
    if isinstance(output, MediaOutput):
        yield where, output
    elif isinstance(output, MixedOutput):
        for index, part in enumerate(output.parts):
            yield from media_parts(part, f"{where}.parts[{index}]")


def _result_schema_extra(schema: dict[str, Any]) -> None:
    # `output` and `error` are each present for exactly one status, never null.
    props = schema["properties"]
    for name in ("output", "error"):
        props[name] = next(s for s in props[name]["anyOf"] if s.get("type") != "null")
    schema["oneOf"] = [
        {
            "properties": {"status": {"const": "ok"}},
            "required": ["output"],
            "not": {"required": ["error"]},
        },
        {
            "properties": {"status": {"const": "error"}},
            "required": ["error"],
            "not": {"required": ["output"]},
        },
    ]


class ToolCallResult(Outbound):
    model_config = ConfigDict(json_schema_extra=_result_schema_extra)

    kind: Literal["ToolCallResult"] = "ToolCallResult"
    version: Version = VERSION
    # RESERVED_ID answers a request too broken to carry a valid id (section 8).
    id: Id | Literal["-"]
    status: Literal["ok", "error"]
    output: Output | None = None
    error: ErrorInfo | None = None

    @model_validator(mode="before")
    @classmethod
    def _output_xor_error(cls, data: Any) -> Any:
        if isinstance(data, dict):
            status = data.get("status")
            wanted, unwanted = ("output", "error") if status == "ok" else ("error", "output")
            if status in ("ok", "error"):
                if data.get(wanted) is None:
                    raise ValueError(f"status {status!r} needs a non-null {wanted!r}")
                if unwanted in data:
                    raise ValueError(f"status {status!r} must not carry {unwanted!r}")
        return data

    def members_after_1_0(self) -> list[str]:
        """Where this result uses a member 1.1 added (`output.parts[3].path`)."""
        found = [f"{where}.path" for where, part in media_parts(self.output)
                 if "path" in part.model_fields_set]  # fmt: skip
        if self.error is not None and "output_tail" in self.error.model_fields_set:
            found.append("error.output_tail")
        return found

    @model_validator(mode="after")
    def _members_of_its_version(self) -> ToolCallResult:
        newer = self.members_after_1_0()
        if newer and not version_at_least(self.version, V1_1):
            raise ValueError(
                f"{newer[0]}: added in 1.1, not a member of a version {self.version} result"
            )
        seen: dict[str, str] = {}
        for where, part in media_parts(self.output):
            if part.path is not None:
                key = path_key(part.path)
                if key in seen:
                    raise ValueError(f"{where}.path: duplicates {seen[key]}.path")
                seen[key] = where
        return self

    @classmethod
    def ok(
        cls,
        id: str,
        output: TextOutput | JsonOutput | MediaOutput | MixedOutput,
        version: str | None = None,
    ) -> ToolCallResult:
        """An ok result; `version` defaults to 1.0, or 1.1 when media parts carry a path."""
        if version is None:
            newer = any(p.path is not None for _, p in media_parts(output))
            version = V1_1 if newer else VERSION
        return cls(id=id, version=version, status="ok", output=output)

    @classmethod
    def fail(
        cls,
        id: str,
        code: ErrorCode,
        message: str,
        retryable: bool = False,
        version: str | None = None,
        *,
        output_tail: str | None = None,
    ) -> ToolCallResult:
        """An error result; `version` defaults to 1.0, or 1.1 with an `output_tail` (of
        which the last OUTPUT_TAIL_MAX characters are kept)."""
        error = ErrorInfo(code=code, message=message[:MAX_MESSAGE], retryable=retryable)
        if output_tail is not None:
            tail = output_tail[-OUTPUT_TAIL_MAX:]
            error = ErrorInfo(
                code=code, message=error.message, retryable=retryable, output_tail=tail
            )
        if version is None:
            version = VERSION if output_tail is None else V1_1
        return cls(id=id, version=version, status="error", error=error)


#: Result members only the runner may set; a worker that sends one gets MALFORMED_OUTPUT.
RUNNER_ONLY_MEMBERS: tuple[str, ...] = ("error.output_tail",)


def runner_only_problem(result: ToolCallResult) -> str | None:
    """Why `result`, as a worker sent it, uses what only the runner may produce (a runner
    code, or `error.output_tail`), or None. The runner refuses such a result."""
    if result.error is None:
        return None
    if result.error.code in RUNNER_ERROR_CODES:
        return f"error.code: {result.error.code} may only be produced by the runner"
    if "output_tail" in result.error.model_fields_set:
        return "error.output_tail: may only be set by the runner"
    return None


# --- describe ------------------------------------------------------------------------


class WorkerInfo(Outbound):
    name: ToolName
    version: Annotated[
        str,
        Field(
            min_length=1, max_length=rules.WORKER_VERSION.longest, pattern=WORKER_VERSION_PATTERN
        ),
    ]


def _remote_reference(node: Any) -> str | None:
    """The first `$ref`/`$dynamicRef` in a schema that points outside it, or None."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in ("$ref", "$dynamicRef"):
                ref = item.get(key)
                if isinstance(ref, str) and not ref.startswith("#"):
                    return ref
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _checked_input_schema(schema: dict[str, Any]) -> dict[str, Any]:
    if schema.get("type") != "object":
        raise ValueError('an input_schema describes an object: {"type": "object", ...}')
    remote = _remote_reference(schema)
    if remote is not None:
        raise ValueError(f"$ref {remote[:80]!r} points outside the schema (no remote refs)")
    return schema


InputSchema = Annotated[
    dict[str, Any],
    AfterValidator(_check_json_bounds),
    AfterValidator(_checked_input_schema),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": MAX_PROPERTIES,
            "propertyNames": {"maxLength": MAX_KEY},
            "additionalProperties": _json_value_schema(),
            "required": ["type"],
            "allOf": [{"properties": {"type": {"const": "object"}}}],
        }
    ),
]


class ToolDescription(Outbound):
    name: ToolName
    description: Annotated[str, Field(max_length=rules.MAX_TOOL_DESCRIPTION)]
    input_schema: InputSchema
    effects: Effects = Field(
        description="none: pure; contained: effects stay in the sandbox; external: reaches"
        " the outside world (never re-run when its outcome is unknown)."
    )


def _unique(values: list[str]) -> list[str]:
    if len(set(values)) != len(values):
        raise ValueError("capabilities: each may appear once")
    return values


Capabilities = Annotated[
    list[Annotated[str, Field(pattern=CAPABILITY_PATTERN, max_length=rules.CAPABILITY.longest)]],
    Field(max_length=MAX_CAPABILITIES, json_schema_extra={"uniqueItems": True}),
    AfterValidator(_unique),
]


class DescribeResult(Outbound):
    kind: Literal["DescribeResult"] = "DescribeResult"
    version: Version = VERSION
    worker: WorkerInfo
    supported_versions: Annotated[
        list[Version],
        Field(
            min_length=1,
            max_length=rules.MAX_SUPPORTED_VERSIONS,
            json_schema_extra={"uniqueItems": True},
        ),
    ]
    tools: Annotated[list[ToolDescription], Field(max_length=MAX_TOOLS)]
    capabilities: Capabilities | None = Field(
        default=None,
        description="1.1: optional features the worker has (`files`, `events`); a runner"
        " ignores the ones it does not know.",
        json_schema_extra=_since(V1_1),
    )

    @model_validator(mode="before")
    @classmethod
    def _capabilities_mean_1_1(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and "version" not in data
            and data.get("capabilities") is not None
        ):
            return {**data, "version": V1_1}  # built in Python with capabilities
        return data

    @model_validator(mode="after")
    def _unique_and_consistent(self) -> DescribeResult:
        # Beyond JSON Schema (uniqueness by one member, membership): section 2.
        if len(set(self.supported_versions)) != len(self.supported_versions):
            raise ValueError("supported_versions: each version may appear once")
        if self.version not in self.supported_versions:
            raise ValueError(f"version: {self.version!r} is not in supported_versions")
        seen: dict[str, int] = {}
        for index, tool in enumerate(self.tools):
            if tool.name in seen:
                raise ValueError(f"tools[{index}].name: the same as tools[{seen[tool.name]}]")
            seen[tool.name] = index
        return self

    @model_validator(mode="after")
    def _members_of_its_version(self) -> DescribeResult:
        if "capabilities" in self.model_fields_set and not version_at_least(self.version, V1_1):
            raise ValueError(
                f"capabilities: added in 1.1, not a member of a version {self.version} result"
            )
        return self


# --- 1.1 events: one per line on standard error ---------------------------------------


class LogEvent(Outbound):
    type: Literal["log"] = "log"
    stream: Literal["stdout", "stderr"]
    text: Annotated[str, Field(max_length=EVENT_TEXT_MAX)]


class ProgressEvent(Outbound):
    type: Literal["progress"] = "progress"
    fraction: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    message: Annotated[str, Field(max_length=EVENT_MESSAGE_MAX)] | None = None


class PartialEvent(Outbound):
    type: Literal["partial"] = "partial"
    text: Annotated[str, Field(max_length=EVENT_TEXT_MAX)]


class DroppedEvent(Outbound):
    type: Literal["dropped"] = "dropped"
    count: Annotated[int, Field(ge=1, le=MAX_SAFE_INTEGER)]


class StreamEvent(
    RootModel[
        Annotated[
            LogEvent | ProgressEvent | PartialEvent | DroppedEvent, Field(discriminator="type")
        ]
    ]
):
    """1.1: one event object, as a worker writes it between RS and LF on stderr."""

    model_config = ConfigDict(strict=True, frozen=True)


#: Every model with a published 1.0 schema, by file name stem.
SCHEMA_MODELS: Mapping[str, type[_Envelope]] = MappingProxyType(
    {
        "tool-call-request": ToolCallRequest,
        "tool-call-result": ToolCallResult,
        "describe-request": DescribeRequest,
        "describe-result": DescribeResult,
    }
)
#: The published schemas of each version: the same models (1.1 only adds members), plus
#: the event objects of 1.1.
SCHEMA_MODELS_BY_VERSION: Mapping[str, Mapping[str, type[BaseModel]]] = MappingProxyType(
    {
        VERSION: SCHEMA_MODELS,
        V1_1: MappingProxyType({**SCHEMA_MODELS, "event": StreamEvent}),
    }
)
