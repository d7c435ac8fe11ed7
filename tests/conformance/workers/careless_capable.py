"""Broken on purpose: a 1.1 worker declaring `files` and `events` that keeps to neither.

It takes any input file name (it keeps the files in memory, so nothing is written
anywhere: the hostile names are only accepted, never used), collects from that memory,
and with `events` in the request streams an invalid event, an over-long line and a flood
past the budget. worker-check must fail the `files.*` hostile-name checks and both
`events.*` checks, and pass `files.roundtrip`. Standard library only (plain json).
"""

import base64
import fnmatch
import json
import sys

ECHO = {
    "name": "echo",
    "description": "Return the given text unchanged.",
    "effects": "none",
    "input_schema": {
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": 65536}},
        "required": ["text"],
        "additionalProperties": False,
    },
}


def answer(doc: dict, status: int) -> None:
    sys.stdout.write(json.dumps(doc))
    sys.exit(status)


def refuse(version: str, code: str, message: str, id_: str = "unknown") -> None:
    answer({"kind": "ToolCallResult", "version": version, "id": id_, "status": "error",
            "error": {"code": code, "message": message, "retryable": False}}, 1)  # fmt: skip


def stream_badly(events: dict) -> None:
    write = sys.stderr.buffer.write
    write(b'\x1e{"type":"log","stream":"stdout","text":"fine"}\n')
    write(b'\x1e{"type":"log","stream":"stdout","text":"x","colour":"red"}\n')
    write(b'\x1e{"type":"partial","text":"' + b"y" * 20000 + b'"}\n')
    for i in range(200):  # far past max_per_second and max_bytes
        write(b'\x1e{"type":"progress","fraction":0.5,"message":"step %d"}\n' % i)
    sys.stderr.flush()


def main() -> None:
    try:
        request = json.loads(sys.stdin.buffer.read())
    except ValueError:
        refuse("1.1", "INVALID_REQUEST", "not JSON")
    version = request.get("version")
    if version not in ("1.0", "1.1"):
        refuse("1.1", "UNSUPPORTED_VERSION", "supported versions: 1.0, 1.1")
    if request.get("kind") == "DescribeRequest":
        described = {"kind": "DescribeResult", "version": version,
                     "worker": {"name": "careless-capable", "version": "0.1"},
                     "supported_versions": ["1.0", "1.1"], "tools": [ECHO]}  # fmt: skip
        if version == "1.1":
            described["capabilities"] = ["files", "events"]
        answer(described, 0)
    id_ = request.get("id", "unknown")
    if request.get("tool", {}).get("name") != "echo":
        refuse(version, "UNKNOWN_TOOL", "this worker has: echo", id_)
    text = request.get("arguments", {}).get("text")
    if not isinstance(text, str):
        refuse(version, "INVALID_ARGUMENTS", "arguments['text']: required string", id_)
    if "events" in request:
        stream_badly(request["events"])
    # The bug: file names are never checked.
    workspace = {}
    for item in request.get("files", []):
        content = item["content"].encode()
        if item.get("encoding") == "base64":
            content = base64.b64decode(item["content"] + "==")
        workspace[item["path"]] = content
    parts = [{"type": "text", "content": text}]
    for pattern in request.get("collect", {}).get("patterns", []):
        for path in sorted(workspace):
            if fnmatch.fnmatch(path, pattern.replace("**/", "")):
                parts.append({"type": "media", "mime_type": "application/octet-stream",
                              "base64_data": base64.b64encode(workspace[path]).decode(),
                              "path": path})  # fmt: skip
    output = {"type": "mixed", "parts": parts} if len(parts) > 1 else parts[0]
    answer({"kind": "ToolCallResult", "version": version, "id": id_, "status": "ok",
            "output": output}, 0)  # fmt: skip


main()
