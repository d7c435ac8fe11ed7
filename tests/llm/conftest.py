"""What the LLM tests share besides the chat server (tests/chat_server.py)."""

from __future__ import annotations

import pytest


class Waits:
    """A stand-in for `anyio.sleep` that records the delays instead of sleeping."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def waits() -> Waits:
    return Waits()
