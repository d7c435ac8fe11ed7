"""Named fault points for the crash matrix: where a test makes this process die, or wait.

`crash_point("ledger.requested")` does nothing unless a test set one of two variables:
- AGENTS_RUNNER_CRASH_AT names the point (comma-separated; `name@N` dies at the N-th
  pass). Then the process sends itself SIGKILL: no cleanup, no flush, like a power cut.
- AGENTS_RUNNER_BARRIER_AT is `name:DIR`. The process writes DIR/arrived.PID and waits
  (blocking, a bounded time) until DIR/go exists, so a test can hold several processes
  at one point and release them together: a real race, not a hopeful one.
Only the crash-matrix tests set them.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

CRASH_ENV = "AGENTS_RUNNER_CRASH_AT"
BARRIER_ENV = "AGENTS_RUNNER_BARRIER_AT"
#: A barrier nobody releases lets the process go on after this long (no test hangs).
BARRIER_MAX_WAIT_S = 120.0
_passes: Counter[str] = Counter()


def crash_point(name: str) -> None:
    _barrier(name)
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    _passes[name] += 1
    for entry in wanted.split(","):
        point, _, nth = entry.strip().partition("@")
        if point == name and (not nth or int(nth) == _passes[name]):
            os.kill(os.getpid(), signal.SIGKILL)


def _barrier(name: str) -> None:
    point, _, directory = os.environ.get(BARRIER_ENV, "").partition(":")
    if point != name or not directory:
        return
    released = Path(directory, "go")
    if released.exists():
        return  # released already: later passes go straight through
    Path(directory, f"arrived.{os.getpid()}").touch()
    give_up = time.monotonic() + BARRIER_MAX_WAIT_S
    while not released.exists() and time.monotonic() < give_up:
        time.sleep(0.002)
