"""A worker whose every word is hostile to a terminal: `hostile_text_worker.py MODE`.

Standard library only. It answers describe (1.0 and 1.1, with `events`) and, for a call,
streams a log event, a progress event and a plain stderr line holding HOSTILE, then:
  ok          answers ok with HOSTILE as its text
  error       answers a TOOL_FAILED error whose message is HOSTILE
  crash       exits 3 without an answer (the runner's WORKER_CRASHED)
  baddescribe (for describe) prints HOSTILE on stderr and exits 1 without an answer
HOSTILE is rich markup beside ESC (CSI, OSC), C1 (CSI, OSC, ST), BEL, DEL and bidi
controls; tests/security/test_terminal_escapes.py holds the same text.
"""

import json
import os
import sys

HOSTILE = (
    "[bold red]ALERT[/bold red] [error X] visible?"
    " \x1b]0;pwned-title\x07 \x1b[31mred\x1b[0m \x9b32mgreen \x9d0;t\x9c \u202eevil\u2066 \x7f end"
)


def event(doc: dict) -> None:
    os.write(2, b"\x1e" + json.dumps(doc).encode() + b"\n")


def main(mode: str) -> None:
    request = json.loads(sys.stdin.buffer.read())
    version = request.get("version")
    if request.get("kind") == "DescribeRequest":
        if mode == "baddescribe":
            sys.stderr.write(HOSTILE + "\n")
            sys.exit(1)
        doc = {"kind": "DescribeResult", "version": version,
               "worker": {"name": "hostile-text", "version": "1.0.0"},
               "supported_versions": ["1.0", "1.1"],
               "tools": [{"name": name, "description": "hostile", "effects": "none",
                          "input_schema": {"type": "object"}}
                         for name in ("say", "oops")]}  # fmt: skip
        if version == "1.1":
            doc["capabilities"] = ["events"]
        sys.stdout.write(json.dumps(doc))
        return
    event({"type": "log", "stream": "stdout", "text": HOSTILE})
    event({"type": "progress", "fraction": 0.5, "message": HOSTILE})
    sys.stderr.write("plain " + HOSTILE + "\n")
    sys.stderr.flush()
    if mode == "crash":
        sys.exit(3)
    base = {"kind": "ToolCallResult", "version": version, "id": request.get("id")}
    if mode == "error":
        error = {"code": "TOOL_FAILED", "message": HOSTILE, "retryable": False}
        sys.stdout.write(json.dumps({**base, "status": "error", "error": error}))
        sys.stdout.flush()
        sys.exit(1)
    output = {"type": "text", "content": HOSTILE}
    sys.stdout.write(json.dumps({**base, "status": "ok", "output": output}))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ok")
