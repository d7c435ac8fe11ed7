"""A 1.1 worker for the runner's tests: `events_worker.py [OPTIONS] MODE [ARG...]`.

Standard library only, so it runs under any python3, on the host or in a container. It
answers describe (1.1 with `--caps`, 1.0 too) and, for a call, streams RS-framed events
on stderr as MODE says, then answers. Options:
  --caps=files,events   the capabilities its 1.1 DescribeResult declares (default both)
  --v10                 a 1.0-only worker: UNSUPPORTED_VERSION for anything but 1.0
  --record=PATH         append every request it reads to PATH (one JSON line each)
Modes:
  ok                    answer at once (echo the request's `files` as media parts)
  lines N INTERVAL      N log events "line I AT_MS" (AT_MS: when it is written), INTERVAL s
                        apart, plain stderr lines between them, then answer
  hang N                N log events, then sleep until killed
  crash N               N log events, then exit 3
  oom N                 N log events, then allocate memory until killed
  flood N               N log events as fast as it can, then answer
  bad                   the invalid lines of BAD_LINES, then one valid event, then answer
  control               one log event whose text holds ESC, a C1 control and a bidi override
  media PATHS_JSON      answer with one media part per path in the JSON array
  tail                  answer with an error carrying output_tail (runner-only)
"""

import base64
import json
import os
import sys
import time

RS = b"\x1e"

BAD_LINES = [
    RS + b"not json",
    RS + b'{"type":"log","stream":"stdout","text":"a","text":"b"}',  # duplicate key
    RS + b'{"type":"shout","text":"x"}',  # unknown type
    RS + b'{"type":"log","stream":"stdout","text":"x","extra":1}',  # unknown member
    RS + b'{"type":"log","stream":"stdin","text":"x"}',  # bad stream
    RS + b'{"type":"progress","fraction":1.5}',  # out of range
    RS + b'{"type":"progress","fraction":NaN}',  # not JSON
    RS + b'{"type":"partial","text":"' + b"x" * 9000 + b'"}',  # text over 8192
    RS + b'{"type":"log","stream":"stdout","text":"\xff"}',  # not UTF-8
    RS + b'["type","log"]',  # not an object
    RS + b'{"type":"log","stream":"stdout","text":"' + b"y" * 20000 + b'"}',  # over-long line
]


def event(doc: dict) -> None:
    os.write(2, RS + json.dumps(doc, separators=(",", ":")).encode() + b"\n")


def log(text: str) -> None:
    event({"type": "log", "stream": "stdout", "text": text})


def lines(count: int, interval: float) -> None:
    for index in range(count):
        if index:
            time.sleep(interval)
        log(f"line {index} {int(time.time() * 1000)}")
        os.write(2, f"plain stderr {index}\n".encode())


def answer(request: dict, doc: dict, code: int = 0) -> None:
    base = {"kind": "ToolCallResult", "version": request.get("version"), "id": request.get("id")}
    sys.stdout.write(json.dumps({**base, **doc}))
    sys.stdout.flush()
    sys.exit(code)


def ok(request: dict, parts: list | None = None) -> None:
    if parts is None:  # the input files, sent back as they came
        parts = []
        for f in request.get("files") or []:
            data = f["content"]
            if f.get("encoding") != "base64":
                data = base64.b64encode(data.encode()).decode()
            parts.append({"type": "media", "mime_type": "application/octet-stream",
                          "base64_data": data, "path": f["path"]})  # fmt: skip
    output = {"type": "mixed", "parts": [{"type": "text", "content": "done"}, *parts]}
    answer(request, {"status": "ok", "output": output})


def describe(request: dict, caps: list[str], v10: bool) -> None:
    version = request.get("version")
    if version not in ("1.0", "1.1") or (v10 and version != "1.0"):
        refuse(request, "UNSUPPORTED_VERSION")
    doc = {
        "kind": "DescribeResult",
        "version": version,
        "worker": {"name": "events-worker", "version": "1.0.0"},
        "supported_versions": ["1.0"] if v10 else ["1.0", "1.1"],
        "tools": [
            {
                "name": "run",
                "description": "test",
                "input_schema": {"type": "object"},
                "effects": "none",
            }
        ],
    }
    if version == "1.1":
        doc["capabilities"] = caps
    sys.stdout.write(json.dumps(doc))
    sys.exit(0)


def refuse(request: dict, code: str) -> None:
    error = {"code": code, "message": "not supported", "retryable": False}
    doc = {"kind": "ToolCallResult", "version": "1.0", "id": request.get("id") or "unknown",
           "status": "error", "error": error}  # fmt: skip
    sys.stdout.write(json.dumps(doc))
    sys.exit(1)


def main(argv: list[str]) -> None:
    caps, v10, record = ["files", "events"], False, None
    while argv and argv[0].startswith("--"):
        option = argv.pop(0)
        if option.startswith("--caps="):
            caps = [c for c in option.split("=", 1)[1].split(",") if c]
        elif option == "--v10":
            v10 = True
        elif option.startswith("--record="):
            record = option.split("=", 1)[1]
    data = sys.stdin.buffer.read()
    if record:
        with open(record, "ab") as f:
            f.write(data + b"\n")
    request = json.loads(data)
    if request.get("kind") == "DescribeRequest":
        describe(request, caps, v10)
    if v10 and request.get("version") != "1.0":
        refuse(request, "UNSUPPORTED_VERSION")
    mode, args = (argv[0], argv[1:]) if argv else ("ok", [])
    if mode == "ok":
        ok(request)
    elif mode == "lines":
        lines(int(args[0]), float(args[1]))
        ok(request)
    elif mode == "hang":
        lines(int(args[0]), 0.05)
        time.sleep(3600)
    elif mode == "crash":
        lines(int(args[0]), 0.05)
        os._exit(3)
    elif mode == "oom":
        lines(int(args[0]), 0.05)
        hog = []
        while True:
            hog.append(bytearray(16 * 1024 * 1024))
    elif mode == "flood":
        for index in range(int(args[0])):
            log(f"flood {index}")
        ok(request)
    elif mode == "bad":
        for line in BAD_LINES:
            os.write(2, line + b"\n")
        log("the valid one")
        os.write(2, RS + b'{"type":"log","stream":"stdout","text":"no LF at the end"}')
        ok(request)
    elif mode == "control":
        log("red \x1b[31malert\x1b[0m \x9b \u202edesrever\u202c tab\tend")
        ok(request)
    elif mode == "media":
        parts = [{"type": "media", "mime_type": "text/plain", "base64_data": "aGk=", "path": p}
                 for p in json.loads(args[0])]  # fmt: skip
        ok(request, parts)
    elif mode == "tail":
        error = {"code": "TOOL_FAILED", "message": "x", "retryable": False, "output_tail": "lie"}
        answer(request, {"status": "error", "error": error}, 1)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
