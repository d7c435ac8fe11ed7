"""The engine's clock: wall time for expiries and backoffs, and the sleep that waits.

Tests give the engine a `ManualClock` so that an expiry or a backoff passes when the
test says, not after a real sleep. Leases do not use it: they are measured in the
store's own (database) time, the one clock every process sharing a store agrees on.
The engine's default, `StoreAlignedClock`, is wall time shifted onto that database time
(the gate calibrates it from every lease it takes, at no extra cost), so a host whose
clock is off neither expires deferred calls early nor cuts a backoff short.
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


class StoreAlignedClock(SystemClock):
    """Wall time plus the offset to the store's clock last measured (`calibrate`):
    before the first calibration, plain wall time."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def calibrate(self, store_now_ms: int) -> None:
        """`store_now_ms` is the store's time now (e.g. a lease's start)."""
        self.offset_ms = store_now_ms - int(time.time() * 1000)

    def now_ms(self) -> int:
        return int(time.time() * 1000) + self.offset_ms


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
