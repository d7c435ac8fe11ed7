"""Version 1 of the envelope: the models, the error codes and the bounds.

These pydantic models are the single source of the contract. The JSON Schema files in
`envelopes/schemas/1.0/` are generated from them by `scripts/gen-schemas` and a test
keeps the two identical.

Two directions, two rules:
- what the runner sends a worker (ToolCallRequest, DescribeRequest) follows must-ignore:
  unknown fields are ignored, so a later 1.x can add optional fields;
- what a worker sends back (ToolCallResult, DescribeResult) is closed and bounded:
  unknown fields, unbounded strings and unexpected types are refused.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, TypeGuard, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    model_serializer,
    model_validator,
)

# The version, bounds and patterns live in envelopes.bounds (standard library only, for
# workers that check requests without pydantic); re-exported here as part of v1.
from envelopes.bounds import (
    BASE64_PATTERN as BASE64_PATTERN,
)
from envelopes.bounds import (
    DEFAULT_MAX_RESULT_BYTES as DEFAULT_MAX_RESULT_BYTES,
)
from envelopes.bounds import (
    EXTENSION_KEY_PATTERN as EXTENSION_KEY_PATTERN,
)
from envelopes.bounds import (
    FILENAME_PATTERN as FILENAME_PATTERN,
)
from envelopes.bounds import (
    ID_PATTERN as ID_PATTERN,
)
from envelopes.bounds import (
    MAJOR as MAJOR,
)
from envelopes.bounds import (
    MAX_EXTENSIONS as MAX_EXTENSIONS,
)
from envelopes.bounds import (
    MAX_ITEMS as MAX_ITEMS,
)
from envelopes.bounds import (
    MAX_KEY as MAX_KEY,
)
from envelopes.bounds import (
    MAX_MESSAGE as MAX_MESSAGE,
)
from envelopes.bounds import (
    MAX_PARTS as MAX_PARTS,
)
from envelopes.bounds import (
    MAX_PROPERTIES as MAX_PROPERTIES,
)
from envelopes.bounds import (
    MAX_REQUEST_BYTES as MAX_REQUEST_BYTES,
)
from envelopes.bounds import (
    MAX_RESULT_BYTES_CEILING as MAX_RESULT_BYTES_CEILING,
)
from envelopes.bounds import (
    MAX_STRING as MAX_STRING,
)
from envelopes.bounds import (
    MAX_TOOLS as MAX_TOOLS,
)
from envelopes.bounds import (
    MIME_PATTERN as MIME_PATTERN,
)
from envelopes.bounds import (
    SUPPORTED_VERSIONS as SUPPORTED_VERSIONS,
)
from envelopes.bounds import (
    TOOL_NAME_PATTERN as TOOL_NAME_PATTERN,
)
from envelopes.bounds import (
    VERSION as VERSION,
)
from envelopes.bounds import (
    VERSION_PATTERN as VERSION_PATTERN,
)
from envelopes.bounds import (
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
#: Whether a retry of the same request can help, for the codes the runner synthesizes
#: (workers set `retryable` themselves). A timeout or a crash may be transient; a memory
#: or output overflow, bad output or a cancellation will happen again.
RUNNER_CODE_RETRYABLE: dict[RunnerErrorCode, bool] = {
    "WORKER_START_FAILED": False,
    "WORKER_TIMEOUT": True,
    "WORKER_CRASHED": True,
    "WORKER_OOM": False,
    "MALFORMED_OUTPUT": False,
    "OUTPUT_TOO_LARGE": False,
    "CANCELLED": False,
}


def is_worker_error_code(code: str) -> TypeGuard[WorkerErrorCode]:
    """Whether `code` is one a worker may send."""
    return code in WORKER_ERROR_CODES


def is_runner_error_code(code: str) -> TypeGuard[RunnerErrorCode]:
    """Whether `code` is one only the runner may produce."""
    return code in RUNNER_ERROR_CODES


Effects = Literal["none", "contained", "external"]


# --- bounded JSON values -------------------------------------------------------------

#: Stands for `{"$ref": "#/$defs/JsonValue"}` until envelopes.schema adds the definition
#: (pydantic refuses references to definitions it did not make itself).
JSON_VALUE_MARKER = "x-agents-runner-json-value"
_JSON_VALUE_SCHEMA: dict[str, Any] = {JSON_VALUE_MARKER: True}
JSON_VALUE_DEF: dict[str, Any] = {
    "description": "Any JSON value, with every string, array and object bounded.",
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER},
        {"type": "number"},
        {"type": "string", "maxLength": MAX_STRING},
        {"type": "array", "maxItems": MAX_ITEMS, "items": _JSON_VALUE_SCHEMA},
        {
            "type": "object",
            "maxProperties": MAX_PROPERTIES,
            "propertyNames": {"maxLength": MAX_KEY},
            "additionalProperties": _JSON_VALUE_SCHEMA,
        },
    ],
}


def _check_json_bounds(value: Any) -> Any:
    """Enforce in Python exactly the bounds JSON_VALUE_DEF states in the schema."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if len(node) > MAX_STRING:
                raise ValueError(f"string longer than {MAX_STRING} characters")
        elif isinstance(node, list):
            if len(node) > MAX_ITEMS:
                raise ValueError(f"array with more than {MAX_ITEMS} items")
            stack.extend(node)
        elif isinstance(node, dict):
            if len(node) > MAX_PROPERTIES:
                raise ValueError(f"object with more than {MAX_PROPERTIES} properties")
            for key in node:
                if not isinstance(key, str) or len(key) > MAX_KEY:
                    raise ValueError(f"object key longer than {MAX_KEY} characters")
            stack.extend(node.values())
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, int):
            if abs(node) > MAX_SAFE_INTEGER:
                raise ValueError("integer outside +-(2^53-1)")
        elif not isinstance(node, float):
            raise ValueError(f"{type(node).__name__} is not a JSON value")
        elif not math.isfinite(node):
            # JSON has no NaN/Infinity; pydantic would silently dump them as null.
            raise ValueError(f"{node} is not a JSON number (non-finite)")
    return value


JsonValue = Annotated[Any, AfterValidator(_check_json_bounds), WithJsonSchema(_JSON_VALUE_SCHEMA)]
JsonObject = Annotated[
    dict[str, Any],
    AfterValidator(_check_json_bounds),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": MAX_PROPERTIES,
            "propertyNames": {"maxLength": MAX_KEY},
            "additionalProperties": _JSON_VALUE_SCHEMA,
        }
    ),
]

Id = Annotated[str, Field(pattern=ID_PATTERN, max_length=128)]
ToolName = Annotated[str, Field(pattern=TOOL_NAME_PATTERN, max_length=64)]
Version = Annotated[str, Field(pattern=VERSION_PATTERN, max_length=9)]
SafeInt = Annotated[int, Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]


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

    session_id: Annotated[str, Field(max_length=128)] | None = None
    call_id: Annotated[str, Field(max_length=128)] | None = None
    attempt: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    idempotency_key: Annotated[str, Field(max_length=256)] | None = None


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
            dict[Annotated[str, Field(pattern=EXTENSION_KEY_PATTERN)], JsonValue],
            # Closed, so the schema refuses un-namespaced keys as the model does.
            Field(max_length=MAX_EXTENSIONS, json_schema_extra={"additionalProperties": False}),
        ]
        | None
    ) = Field(default=None, description="Namespaced keys (`vendor/key`); ignored when unknown.")


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
    mime_type: Annotated[str, Field(pattern=MIME_PATTERN, max_length=193)]
    base64_data: Annotated[str, Field(pattern=BASE64_PATTERN, max_length=MAX_STRING)]
    filename: Annotated[str, Field(pattern=FILENAME_PATTERN, max_length=255)] | None = None


class MixedOutput(Outbound):
    type: Literal["mixed"] = "mixed"
    parts: Annotated[list[Output], Field(max_length=MAX_PARTS)]


Output = Annotated[TextOutput | JsonOutput | MediaOutput | MixedOutput, Field(discriminator="type")]
MixedOutput.model_rebuild()


class ErrorInfo(Outbound):
    code: ErrorCode
    message: Annotated[str, Field(max_length=MAX_MESSAGE)]
    retryable: bool


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
    id: Id
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

    @classmethod
    def ok(
        cls,
        id: str,
        output: TextOutput | JsonOutput | MediaOutput | MixedOutput,
        version: str = VERSION,
    ) -> ToolCallResult:
        return cls(id=id, version=version, status="ok", output=output)

    @classmethod
    def fail(
        cls,
        id: str,
        code: ErrorCode,
        message: str,
        retryable: bool = False,
        version: str = VERSION,
    ) -> ToolCallResult:
        error = ErrorInfo(code=code, message=message[:MAX_MESSAGE], retryable=retryable)
        return cls(id=id, version=version, status="error", error=error)


# --- describe ------------------------------------------------------------------------


class WorkerInfo(Outbound):
    name: Annotated[str, Field(pattern=TOOL_NAME_PATTERN, max_length=64)]
    version: Annotated[str, Field(min_length=1, max_length=64, pattern=WORKER_VERSION_PATTERN)]


class ToolDescription(Outbound):
    name: ToolName
    description: Annotated[str, Field(max_length=4096)]
    input_schema: JsonObject
    effects: Effects = Field(
        description="none: pure; contained: effects stay in the sandbox; external: reaches"
        " the outside world (never re-run when its outcome is unknown)."
    )


class DescribeResult(Outbound):
    kind: Literal["DescribeResult"] = "DescribeResult"
    version: Version = VERSION
    worker: WorkerInfo
    supported_versions: Annotated[list[Version], Field(min_length=1, max_length=16)]
    tools: Annotated[list[ToolDescription], Field(max_length=MAX_TOOLS)]


#: Every model with a published schema, by file name stem.
SCHEMA_MODELS: dict[str, type[_Envelope]] = {
    "tool-call-request": ToolCallRequest,
    "tool-call-result": ToolCallResult,
    "describe-request": DescribeRequest,
    "describe-result": DescribeResult,
}


def major_of(version: str) -> int | None:
    """The major number of a `major.minor` string, or None when it is not one."""
    head, dot, tail = version.partition(".")
    if dot and head.isdigit() and tail.isdigit() and len(head) <= 4 and len(tail) <= 4:
        return int(head)
    return None
