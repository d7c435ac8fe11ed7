"""A v1.1 worker declaring the `events` capability, written from docs/envelope-v1.md
("Events") with the standard library only (run with -S), so tests need no image.

Its one tool, `build`, takes {"steps": N}. When the request carries `events`, it frames
on stderr, per step, a progress event (`step i of N`) and a stdout log line (`line i`),
plus one plain stderr line and one invalid event line (which the runner counts and
drops). Then, with argv[1] = GATE, it waits for the file GATE to exist before answering
(so a test can watch the call run), until the request's deadline. It answers
`built N step(s)`.
"""

import json
import os
import sys
import time

RS = "\x1e"
STEPS = {"type": "object", "properties": {"steps": {"type": "integer"}}}
TOOL = {"name": "build", "description": "Build in steps, reporting progress.",
        "effects": "contained", "input_schema": STEPS}  # fmt: skip


def answer(document, status=0):
    sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    sys.exit(status)


def event(document):
    sys.stderr.write(RS + json.dumps(document, separators=(",", ":")) + "\n")
    sys.stderr.flush()


request = json.loads(sys.stdin.buffer.read())
version = request.get("version")
if version not in ("1.0", "1.1"):
    answer({"kind": "ToolCallResult", "version": "1.1", "id": request.get("id", "unknown"),
            "status": "error", "error": {"code": "UNSUPPORTED_VERSION", "retryable": False,
            "message": "supported versions: 1.0, 1.1"}}, 1)  # fmt: skip
if request.get("kind") == "DescribeRequest":
    described = {"kind": "DescribeResult", "version": version,
                 "worker": {"name": "streaming-test", "version": "0.1.0"},
                 "supported_versions": ["1.0", "1.1"], "tools": [TOOL]}  # fmt: skip
    if version == "1.1":
        described["capabilities"] = ["events"]
    answer(described)

steps = int(request["arguments"].get("steps", 3))
if request.get("events") is not None:
    sys.stderr.write("a plain log line, kept in the stderr tail\n")
    event({"type": "log", "stream": "stdout", "text": "starting", "extra": 1})  # invalid
    for step in range(1, steps + 1):
        event({"type": "progress", "fraction": step / steps, "message": f"step {step} of {steps}"})
        event({"type": "log", "stream": "stdout", "text": f"line {step}"})
gate = sys.argv[1] if len(sys.argv) > 1 else None
while gate is not None and not os.path.exists(gate):
    if time.time() * 1000 > request["deadline_ms"]:
        break
    time.sleep(0.02)
answer({"kind": "ToolCallResult", "version": version, "id": request["id"], "status": "ok",
        "output": {"type": "text", "content": f"built {steps} step(s)"}})  # fmt: skip
