"""Broken on purpose: a correct worker (the Python example) that also prints a log line
on stdout before its answer. worker-check must fail `stdout.pure`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "workers" / "python"))

from worker import worker

from envelopes import codec

answer = worker.handle(sys.stdin.buffer.read())
print("example: handling one request", flush=True)  # the bug: a log line on stdout
sys.stdout.buffer.write(codec.encode(answer))
sys.stdout.flush()
sys.exit(1 if getattr(answer, "status", "ok") == "error" else 0)
