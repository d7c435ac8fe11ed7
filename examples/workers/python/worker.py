"""Example worker in Python, on the SDK (envelopes.worker): `echo` and `ledger_append`.

    python3 examples/workers/python/worker.py < request.json

`ledger_append` has external effects: it appends a line to the ledger file ($LEDGER_FILE,
default $TMPDIR/ledger.jsonl) at most once per `context.idempotency_key`; a retry with the
same key returns the line already written instead of writing it again.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from envelopes.v1 import ToolCallRequest
from envelopes.worker import ToolError, Worker

worker = Worker("example-python", "1.0.0")
VERBOSE = os.environ.get("AGENTS_RUNNER_LOG_LEVEL") == "debug"


def log(message: str) -> None:
    if VERBOSE:
        print(f"example-python: {message}", file=sys.stderr)


def check_deadline(request: ToolCallRequest) -> None:
    if time.time() * 1000 >= request.deadline_ms:
        raise ToolError("DEADLINE_EXCEEDED", "the deadline passed before the tool ran", True)


@worker.tool(
    "echo",
    description="Return the given text unchanged.",
    effects="none",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": 65536}},
        "required": ["text"],
        "additionalProperties": False,
    },
)
def echo(arguments: dict[str, Any], request: ToolCallRequest) -> str:
    log(f"echo for call {request.id}")
    check_deadline(request)
    return arguments["text"]


@worker.tool(
    "ledger_append",
    description="Append an entry to the ledger, at most once per idempotency key.",
    effects="external",
    input_schema={
        "type": "object",
        "properties": {"entry": {"type": "string", "maxLength": 4096}},
        "required": ["entry"],
        "additionalProperties": False,
    },
)
def ledger_append(arguments: dict[str, Any], request: ToolCallRequest) -> dict[str, Any]:
    log(f"ledger_append for call {request.id}")
    check_deadline(request)
    key = request.context.idempotency_key if request.context else None
    if not key:
        raise ToolError("TOOL_FAILED", "ledger_append needs context.idempotency_key")
    ledger = Path(os.environ.get("LEDGER_FILE") or Path(tempfile.gettempdir(), "ledger.jsonl"))
    try:
        if ledger.exists():
            for line in ledger.read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                if record.get("idempotency_key") == key:
                    return {**record, "appended": False}
        record = {"idempotency_key": key, "entry": arguments["entry"]}
        with ledger.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    except (OSError, ValueError) as exc:
        raise ToolError("UNAVAILABLE", f"the ledger cannot be used: {exc}", True) from None
    return {**record, "appended": True}


if __name__ == "__main__":
    worker.serve()
