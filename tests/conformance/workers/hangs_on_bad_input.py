"""Broken on purpose: when the request is not JSON it can read, it waits forever instead
of answering INVALID_REQUEST. worker-check must fail the malformed-request probes
(`request.empty`, `request.truncated`, ...) with a timeout, and still finish."""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "workers" / "python"))

from worker import worker

from envelopes import codec

data = sys.stdin.buffer.read()
try:
    json.loads(data)
except Exception:
    while True:  # the bug: stuck on input it cannot parse
        time.sleep(1)
answer = worker.handle(data)
sys.stdout.buffer.write(codec.encode(answer))
sys.stdout.flush()
sys.exit(1 if getattr(answer, "status", "ok") == "error" else 0)
