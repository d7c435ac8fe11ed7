"""The agents-runner envelope: the JSON contract between a runner and a worker.

Importable on its own (pydantic only). `v1` holds the models and codes, `wire` the strict
JSON parser, `codec` bytes-to-envelope for both sides, `worker` a small SDK for Python
workers, and `schemas/1.0/` the published JSON Schemas. `agents_exe` is agents-exe's
isolation envelope and UserToolResponse, for workers written for agents-exe (the
compatibility mode of docs/envelope-v1.md, section 10).
"""

from envelopes import agents_exe
from envelopes.codec import (
    MalformedOutput,
    RequestError,
    decode_describe_result,
    decode_request,
    decode_result,
    encode,
)
from envelopes.v1 import (
    ERROR_CODES,
    RUNNER_ERROR_CODES,
    SUPPORTED_VERSIONS,
    VERSION,
    WORKER_ERROR_CODES,
    CallContext,
    DescribeRequest,
    DescribeResult,
    ErrorCode,
    ErrorInfo,
    JsonOutput,
    MediaOutput,
    MixedOutput,
    RequestLimits,
    RunnerErrorCode,
    TextOutput,
    ToolCallRequest,
    ToolCallResult,
    ToolDescription,
    ToolRef,
    WorkerErrorCode,
    WorkerInfo,
)
from envelopes.wire import WireError

__all__ = [
    "ERROR_CODES",
    "RUNNER_ERROR_CODES",
    "SUPPORTED_VERSIONS",
    "VERSION",
    "WORKER_ERROR_CODES",
    "CallContext",
    "DescribeRequest",
    "DescribeResult",
    "ErrorCode",
    "ErrorInfo",
    "JsonOutput",
    "MalformedOutput",
    "MediaOutput",
    "MixedOutput",
    "RequestError",
    "RequestLimits",
    "RunnerErrorCode",
    "TextOutput",
    "ToolCallRequest",
    "ToolCallResult",
    "ToolDescription",
    "ToolRef",
    "WireError",
    "WorkerErrorCode",
    "WorkerInfo",
    "agents_exe",
    "decode_describe_result",
    "decode_request",
    "decode_result",
    "encode",
]
