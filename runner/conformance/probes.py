"""The raw request payloads of the battery, including bytes no runner would ever send.

Each malformed payload is a request a strict worker must refuse with INVALID_REQUEST.
They are built as bytes on purpose: BOMs, invalid UTF-8, duplicate keys, NaN and lone
surrogates cannot come out of a well-behaved JSON encoder.
"""

from __future__ import annotations

import json
import time
from typing import Any

from envelopes.v1 import VERSION

#: Bytes of the oversized string: well under the 16 MiB request cap, far over the id's 128.
HUGE_STRING_BYTES = 2 * 1024 * 1024
#: Nesting depth of the deep-nesting probe (the wire format allows 64).
DEEP_NESTING = 100_000
#: Sent in arguments where the worker must not repeat it (error messages, logs).
CANARY = "canary-7f3a9c1e-do-not-echo"


def request(
    probe_id: str,
    tool: str,
    arguments: dict[str, Any],
    *,
    seconds: float = 30.0,
    max_result_bytes: int = 1024 * 1024,
    version: str = VERSION,
    **extra: Any,
) -> dict[str, Any]:
    """A well-formed ToolCallRequest document (as a dict) for one probe."""
    return {
        "kind": "ToolCallRequest",
        "version": version,
        "id": f"wc-{probe_id}",
        "tool": {"name": tool},
        "arguments": arguments,
        "deadline_ms": int((time.time() + seconds) * 1000),
        "limits": {"max_result_bytes": max_result_bytes},
        "context": {
            "session_id": "worker-check",
            "call_id": probe_id,
            "attempt": 1,
            "idempotency_key": f"worker-check/{probe_id}/{time.time_ns()}",
        },
        **extra,
    }


def encode(document: dict[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


def malformed(tool: str) -> dict[str, bytes]:
    """Probe id -> payload; every one must be answered with INVALID_REQUEST."""
    valid = encode(request("malformed", tool, {}))
    body = valid[1:]  # everything after the opening brace
    deep = b"[" * DEEP_NESTING + b"]" * DEEP_NESTING
    missing = request("missing-field", tool, {})
    del missing["limits"]
    return {
        "request.empty": b"",
        "request.truncated": valid[: len(valid) // 2],
        "request.bom": b"\xef\xbb\xbf" + valid,
        "request.invalid_utf8": valid[:-1] + b',"x":"\xff\xfe"}',
        "request.duplicate_keys": b'{"id":"wc-dup",' + body,
        "request.nan": valid[:-1] + b',"x":NaN}',
        "request.lone_surrogate": valid[:-1] + b',"x":"\\ud800"}',
        "request.deep_nesting": valid[:-1] + b',"x":' + deep + b"}",
        "request.huge_string": encode({**request("huge", tool, {}), "id": "x" * HUGE_STRING_BYTES}),
        "request.missing_field": encode(missing),
    }


def bad_arguments(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments the schema refuses, carrying the canary as a value: a string property
    given a list holding the canary, else an undeclared property set to the canary."""
    properties = schema.get("properties") or {}
    for name, prop in properties.items():
        if isinstance(prop, dict) and prop.get("type") == "string":
            return {**arguments, name: [CANARY]}
    return {**arguments, "worker_check_unexpected": CANARY}
