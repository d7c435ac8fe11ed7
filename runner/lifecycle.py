"""`async with` for anything that owns resources and releases them in `aclose()`.

Runners, pools and LLM clients all follow one rule (httpx's): what opens something
closes it, by `await thing.aclose()` or by leaving `async with thing:`. Deriving from
`AsyncClosing` gives the `async with` half; the class writes `aclose` (idempotent).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self


class AsyncClosing(ABC):
    @abstractmethod
    async def aclose(self) -> None:
        """Release what this object owns; calling it again does nothing."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
