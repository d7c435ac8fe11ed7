"""The raw request payloads of the battery, including bytes no runner would ever send.

Each malformed payload is a request no worker may answer `ok`, and that a strict worker
refuses with INVALID_REQUEST. They are built as bytes on purpose: BOMs, invalid UTF-8,
duplicate keys, NaN and lone surrogates cannot come out of a well-behaved JSON encoder.
The 1.1 probes (files, events) are at the end.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from types import MappingProxyType
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


def encode(document: Mapping[str, Any]) -> bytes:
    """The probe's bytes; the constant tables below are read-only (MappingProxyType), and
    are written as the JSON objects they stand for."""
    return json.dumps(document, ensure_ascii=False, default=_thawed).encode("utf-8")


def _thawed(value: object) -> dict[str, Any]:
    if isinstance(value, MappingProxyType):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def frozen(document: Any) -> Any:
    """`document` read-only all the way down: a constant table no probe can change."""
    if isinstance(document, dict):
        return MappingProxyType({key: frozen(value) for key, value in document.items()})
    if isinstance(document, list | tuple):
        return tuple(frozen(value) for value in document)
    return document


#: The tool every malformed probe names: no worker has it. Whatever a lenient parser makes
#: of a malformed probe's bytes (last or first of duplicate keys, NaN as a number, invalid
#: UTF-8 replaced), it reads a call of an unknown tool, so a worker that checks the fields
#: it uses answers an error even without a strict parser (the `required` level). Only a
#: worker that sees the defect itself answers INVALID_REQUEST (the `strict` level).
POISON_TOOL = "worker-check-no-such-tool"


def malformed() -> dict[str, bytes]:
    """Probe id -> payload: each must never be answered `ok`; a strict worker answers
    INVALID_REQUEST."""
    valid = encode(request("malformed", POISON_TOOL, {}))
    body = valid[1:]  # everything after the opening brace
    deep = b"[" * DEEP_NESTING + b"]" * DEEP_NESTING
    missing = request("missing-field", POISON_TOOL, {})
    del missing["limits"]
    huge = {**request("huge", POISON_TOOL, {}), "id": "x" * HUGE_STRING_BYTES}
    # Section 3.1: the extensions' namespace is closed (9.1: a key without `vendor.domain/`).
    bad_key = request("extension-key", POISON_TOOL, {}, extensions={"NoNamespace": True})
    return {
        "request.empty": b"",
        "request.truncated": valid[: len(valid) // 2],
        "request.bom": b"\xef\xbb\xbf" + valid,
        "request.invalid_utf8": valid[:-1] + b',"x":"\xff\xfe"}',
        # Both copies of `tool` name unknown tools: first-wins and last-wins read alike.
        "request.duplicate_keys": b'{"tool":{"name":"' + POISON_TOOL.encode() + b'-2"},' + body,
        "request.nan": valid[:-1] + b',"x":NaN}',
        "request.lone_surrogate": valid[:-1] + b',"x":"\\ud800"}',
        "request.deep_nesting": valid[:-1] + b',"x":' + deep + b"}",
        "request.huge_string": encode(huge),
        "request.missing_field": encode(missing),
        "request.extension_key": encode(bad_key),
    }


def bad_arguments(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments the schema refuses, carrying the canary as a value: a string property
    given a list holding the canary, else an undeclared property set to the canary."""
    properties = schema.get("properties") or {}
    for name, prop in properties.items():
        if isinstance(prop, dict) and prop.get("type") == "string":
            return {**arguments, name: [CANARY]}
    return {**arguments, "worker_check_unexpected": CANARY}


# --- 1.1: files and events ------------------------------------------------------------

#: The version the capability probes carry.
V1_1 = "1.1"
#: The harmless input files of the files round trip, and the patterns that collect them.
ROUNDTRIP_TEXT = "worker-check/in.txt"
ROUNDTRIP_BINARY = "worker-check/sub/data.bin"
ROUNDTRIP_PATTERNS = ("worker-check/*.txt", "worker-check/**/*.bin")


def roundtrip_files(nonce: str) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    """Two input files (text, and base64 bytes in a subdirectory) and the bytes each
    must come back with."""
    text = f"worker-check {nonce}\n".encode()
    binary = bytes(range(256)) + nonce.encode()
    files: list[dict[str, Any]] = [
        {"path": ROUNDTRIP_TEXT, "content": text.decode()},
        {"path": ROUNDTRIP_BINARY, "content": base64.b64encode(binary).decode(),
         "encoding": "base64", "mode": 0o600},
    ]  # fmt: skip
    return files, {ROUNDTRIP_TEXT: text, ROUNDTRIP_BINARY: binary}


def _file(path: str, content: str = "worker-check\n", **extra: Any) -> dict[str, Any]:
    return {"path": path, "content": content, **extra}


#: Probe id -> the `files` (and `collect`) of a request every worker declaring `files`
#: must refuse before its tool runs. `parent_of_other` is the write-through case: a file
#: named like a directory that another file would be written through (what a symlink in
#: an archive does).
HOSTILE_FILES: Mapping[str, Mapping[str, Any]] = frozen(
    {
        "files.absolute": {"files": [_file("/tmp/worker-check-escape.txt")]},
        "files.dotdot": {"files": [_file("../worker-check-escape.txt")]},
        "files.dotdot_inner": {"files": [_file("wc/../../worker-check-escape.txt")]},
        "files.nul": {"files": [_file("wc/in\u0000.txt")]},
        "files.control": {"files": [_file("wc/\u001b[2Jin.txt")]},
        "files.bidi": {"files": [_file("wc/in\u202etxt.exe")]},
        "files.backslash": {"files": [_file("..\\worker-check-escape.txt")]},
        "files.empty_component": {"files": [_file("wc//in.txt")]},
        "files.duplicate": {"files": [_file("wc/in.txt"), _file("wc/in.txt")]},
        "files.casefold_duplicate": {
            "files": [_file("wc/Caf\u00e9.txt"), _file("wc/CAFE\u0301.TXT")]
        },
        "files.parent_of_other": {"files": [_file("wc/a"), _file("wc/a/b.txt")]},
        "files.bad_base64": {"files": [_file("wc/in.bin", "not base64!", encoding="base64")]},
        "files.setuid": {"files": [_file("wc/run.sh", mode=0o4755)]},
        "files.collect_dotdot": {"collect": {"patterns": ["../*"]}},
        "files.collect_absolute": {"collect": {"patterns": ["/etc/*"]}},
    }
)

#: The budget the events probe asks for: small, so that a worker that ignores it shows.
EVENTS_BUDGET = MappingProxyType({"max_per_second": 10, "max_bytes": 4096})

#: The patterns of the trailing-`**` probe (section 9.1): `worker-check/**` alone must
#: return every file under `worker-check`, at any depth.
TRAILING_GLOBSTAR_PATTERNS = ("worker-check/**",)


# --- versions: rules 2 and 3 of section 8.1 --------------------------------------------

#: Probe id -> (kind, version) of a request refused by rule 2 or 3 of section 8.1, before
#: its version is looked up: a worker answers an error (required), exactly INVALID_REQUEST
#: (strict). `kind_first` has an unsupported version too: the kind is checked first.
VERSION_GRAMMAR: Mapping[str, tuple[str, Any]] = MappingProxyType(
    {
        "version.leading_zero": ("ToolCallRequest", "1.01"),
        "version.major_only": ("ToolCallRequest", "2"),
        "version.number": ("ToolCallRequest", 1.0),
        "version.kind_first": ("ToolCallResponse", "2.0"),
    }
)


def version_grammar() -> dict[str, bytes]:
    """Probe id -> payload (calls of the poison tool, so a lenient worker still refuses)."""
    payloads = {}
    for check_id, (kind, version) in VERSION_GRAMMAR.items():
        document = request(check_id.replace(".", "-"), POISON_TOOL, {})
        payloads[check_id] = encode({**document, "kind": kind, "version": version})
    return payloads


#: The malformed probes whose request has no id a worker can read: their answers carry
#: the reserved id "-" (section 8.2). `missing_field` has a valid id, which is echoed.
NO_VALID_ID = frozenset(
    f"request.{name}"
    for name in ("empty", "truncated", "bom", "invalid_utf8", "duplicate_keys", "nan",
                 "lone_surrogate", "deep_nesting", "huge_string")
)  # fmt: skip
#: The probes refused by rules 1 to 3 of section 8.1, before any version is read: their
#: answers carry the worker's highest version (section 8.2). `huge_string` and
#: `missing_field` are acceptable JSON of a spoken version, refused by rule 5: echoed.
REFUSED_BEFORE_VERSION = (NO_VALID_ID - {"request.huge_string"}) | frozenset(VERSION_GRAMMAR)
#: The reserved id (section 8.2), which the id pattern refuses.
RESERVED_ID = "-"


# --- critical: must-understand (section 3.1) -------------------------------------------

#: An extension key no worker implements.
UNKNOWN_EXTENSION = "worker-check.example/must-understand"

#: Probe id -> members added to a 1.1 fixture call that a 1.1 worker MUST refuse with
#: INVALID_REQUEST (R7): `critical` naming a member it does not implement, an extension
#: it does not implement, a member the request does not carry, or a name twice.
CRITICAL_REFUSED: Mapping[str, Mapping[str, Any]] = frozen(
    {
        "critical.unknown": {
            "x_worker_check_future": {"added_in": "1.9"},
            "critical": ["x_worker_check_future"],
        },
        "critical.unknown_extension": {
            "extensions": {UNKNOWN_EXTENSION: True},
            "critical": [UNKNOWN_EXTENSION],
        },
        "critical.absent": {"critical": ["events"]},
        "critical.duplicate": {"critical": ["context", "context"]},
    }
)
#: A `critical` naming only a 1.0 member the request carries: every worker implements it,
#: so the call runs (a worker that refused every `critical` could not take `files`).
CRITICAL_UNDERSTOOD: Mapping[str, Any] = frozen({"critical": ["context"]})
