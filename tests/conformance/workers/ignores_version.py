"""Broken on purpose: answers every request as if its version were 1.0, so it never
says UNSUPPORTED_VERSION. worker-check must fail `version.2.0`, `version.0.9` and
`version.1.999`, and the `critical.*` refusals (read as 1.0, `critical` is ignored)."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "workers" / "python"))

from worker import worker

from envelopes import codec

# The bug: whatever version was asked for, answer as if it were 1.0.
data = re.sub(rb'"version"\s*:\s*"[^"]*"', b'"version":"1.0"', sys.stdin.buffer.read(), count=1)
answer = worker.handle(data)

sys.stdout.buffer.write(codec.encode(answer))
sys.stdout.flush()
sys.exit(1 if getattr(answer, "status", "ok") == "error" else 0)
