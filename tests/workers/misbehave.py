"""A worker that misbehaves on purpose: `misbehave.py MODE`. Standard library only, so it
runs under any python3, on the host or in a container. Each MODE is one failure a runner
must turn into a typed outcome."""

import json
import os
import subprocess
import sys
import time


def request_id() -> str:
    try:
        return json.loads(sys.stdin.buffer.read()).get("id", "unknown")
    except ValueError:
        return "unknown"


def result(rid: str, **fields: object) -> bytes:
    doc = {
        "kind": "ToolCallResult",
        "version": "1.0",
        "id": rid,
        "status": "ok",
        "output": {"type": "text", "content": "fine"},
    }
    doc.update(fields)
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


def emit(data: bytes, code: int = 0) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    sys.exit(code)


def error_doc(rid: str, code: str) -> bytes:
    error = {"code": code, "message": "boom", "retryable": False}
    return result(rid, status="error", output=None, error=error)


def main(mode: str) -> None:
    if mode == "never_reads":  # exits without reading stdin
        emit(result("unknown"))
    rid = request_id()
    if mode == "ok":
        print("a log line", file=sys.stderr)
        emit(result(rid))
    elif mode == "tool_error":
        emit(error_doc(rid, "TOOL_FAILED"), 1)
    elif mode == "stdout_flood":
        chunk = b"x" * 65536
        while True:
            sys.stdout.buffer.write(chunk)
    elif mode == "stderr_flood":
        chunk = b"e" * 65536
        while True:
            sys.stderr.buffer.write(chunk)
    elif mode == "never_exits":
        time.sleep(3600)
    elif mode == "ignores_sigterm":
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)
    elif mode == "grandchild_holds_pipes":
        subprocess.Popen(["sleep", "3600"])  # inherits stdout and stderr
        emit(result(rid))
    elif mode == "empty_exit0":
        sys.exit(0)
    elif mode == "two_documents":
        emit(result(rid) + b"\n" + result(rid))
    elif mode == "trailing_garbage":
        emit(result(rid) + b" garbage")
    elif mode == "nan":
        emit(result(rid, output={"type": "json", "content": float("nan")}))
    elif mode == "huge_number":
        emit(
            result(rid)
            .replace(b'"content": "fine"', b'"content": 1e400')
            .replace(b'"type": "text"', b'"type": "json"')
        )
    elif mode == "wrong_id":
        emit(result(rid + "-other"))
    elif mode == "wrong_version":
        emit(result(rid, version="1.1"))
    elif mode == "error_exit0":
        emit(error_doc(rid, "TOOL_FAILED"), 0)
    elif mode == "ok_exit1":
        emit(result(rid), 1)
    elif mode == "runner_code":
        emit(error_doc(rid, "WORKER_OOM"), 1)
    elif mode == "exit3":
        emit(result(rid), 3)
    elif mode == "segfault":
        os.kill(os.getpid(), 11)
    elif mode == "env":  # reports its environment, for the allow-list tests
        emit(result(rid, output={"type": "json", "content": dict(os.environ)}))
    else:
        sys.exit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1])
