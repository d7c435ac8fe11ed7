"""The agents-runner envelope: the JSON contract between a runner and a worker.

Importable on its own (pydantic only; the names below load on first use). `v1` holds the
models and codes, `rules` the version, bounds, patterns and checks (each rule once),
`wire` the strict JSON parser, `codec` bytes-to-envelope for both sides, `worker` a small
SDK for Python workers (which starts without pydantic), and `schemas/<version>/` the
published JSON Schemas (1.0 and 1.1). `agents_exe` is agents-exe's isolation envelope
and UserToolResponse, for workers written for agents-exe (the compatibility mode of
docs/envelope-v1.md, section 10).
"""

from __future__ import annotations

from types import MappingProxyType

#: typing itself costs a fresh process milliseconds; mypy reads this name as typing's.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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
        LATEST_VERSION,
        RUNNER_ERROR_CODES,
        SUPPORTED_VERSIONS,
        VERSION,
        WORKER_ERROR_CODES,
        CallContext,
        Collect,
        DescribeRequest,
        DescribeResult,
        ErrorCode,
        ErrorInfo,
        EventBudget,
        InputFile,
        JsonOutput,
        MediaOutput,
        MixedOutput,
        RequestLimits,
        RunnerErrorCode,
        StreamEvent,
        TextOutput,
        ToolCallRequest,
        ToolCallResult,
        ToolDescription,
        ToolRef,
        WorkerErrorCode,
        WorkerInfo,
    )
    from envelopes.wire import WireError

#: Where each exported name lives. Loaded on first use, so that `import envelopes.worker`
#: (a worker's start) does not pay for pydantic and the models unless it needs them.
_HOMES = MappingProxyType(
    {
        "MalformedOutput": "codec",
        "RequestError": "codec",
        "WireError": "wire",
        **dict.fromkeys(("decode_describe_result", "decode_request"), "codec"),
        **dict.fromkeys(("decode_result", "encode"), "codec"),
    }
)


def __getattr__(name: str) -> Any:
    import importlib

    if name == "agents_exe":
        return importlib.import_module("envelopes.agents_exe")
    if name not in __all__:
        raise AttributeError(f"module 'envelopes' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"envelopes.{_HOMES.get(name, 'v1')}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ERROR_CODES",
    "LATEST_VERSION",
    "RUNNER_ERROR_CODES",
    "SUPPORTED_VERSIONS",
    "VERSION",
    "WORKER_ERROR_CODES",
    "CallContext",
    "Collect",
    "DescribeRequest",
    "DescribeResult",
    "ErrorCode",
    "ErrorInfo",
    "EventBudget",
    "InputFile",
    "JsonOutput",
    "MalformedOutput",
    "MediaOutput",
    "MixedOutput",
    "RequestError",
    "RequestLimits",
    "RunnerErrorCode",
    "StreamEvent",
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
