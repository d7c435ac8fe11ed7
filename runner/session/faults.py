"""Named crash points for the crash matrix: where a test makes this process die.

`crash_point("ledger.requested")` does nothing unless the environment variable
AGENTS_RUNNER_CRASH_AT names that point (comma-separated; `name@N` dies at the N-th
pass). Then the process sends itself SIGKILL: no cleanup, no flush, like a power cut.
Only the crash-matrix tests set the variable.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

CRASH_ENV = "AGENTS_RUNNER_CRASH_AT"
_passes: Counter[str] = Counter()


def crash_point(name: str) -> None:
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    _passes[name] += 1
    for entry in wanted.split(","):
        point, _, nth = entry.strip().partition("@")
        if point == name and (not nth or int(nth) == _passes[name]):
            os.kill(os.getpid(), signal.SIGKILL)
