"""The engine's clock: wall time for expiries and backoffs, and the sleep that waits.

Tests give the engine a `ManualClock` so that an expiry or a backoff passes when the
test says, not after a real sleep. Leases do not use it: they are measured in the
store's own (database) time, the one clock every process sharing a store agrees on.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio


class Clock(Protocol):
    def now_ms(self) -> int:
        """Epoch milliseconds."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to (`advance`) or when someone sleeps on it:
    a sleep returns at once, having moved the clock forward by its length."""

    def __init__(self, start_ms: int | None = None) -> None:
        self.ms = start_ms if start_ms is not None else int(time.time() * 1000)
        self.slept: list[float] = []

    def now_ms(self) -> int:
        return self.ms

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(max(0.0, seconds))
        await anyio.lowlevel.checkpoint()
