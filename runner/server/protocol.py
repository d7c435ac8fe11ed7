"""uvicorn's h11 protocol with a deadline for reading a request's head.

uvicorn has no such timeout (its keep-alive timer runs only between requests, and any
byte received cancels it), so a client sending a head a byte at a time, or nothing at
all, holds its connection for ever (slowloris). `HeadTimeoutH11` closes a connection
whose request line and headers are not all in within `head_timeout_s` of the
connection opening, or of the first byte of the next request on a kept-alive one.
Bodies are not covered (they are capped in size by the app). Passed to uvicorn as
`Config(http=...)`, its supported way to choose the HTTP protocol class; only the
`serve` command imports this module."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

#: The default deadline for a request's head (seconds).
HEAD_TIMEOUT_S = 10.0


def head_timeout_protocol(head_timeout_s: float) -> type[H11Protocol]:
    """The protocol class for uvicorn's `http=`, with this deadline."""

    class Protocol(HeadTimeoutH11):
        timeout_s = head_timeout_s

    return Protocol


class HeadTimeoutH11(H11Protocol):
    timeout_s = HEAD_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._reading_head():
            if self._head_timer is None:  # the first byte of a kept-alive request's head
                self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _reading_head(self) -> bool:
        # h11 stays IDLE until a whole head is parsed; a partial one is only buffered.
        return self.conn.their_state is h11.IDLE and not self.transport.is_closing()

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expired(self) -> None:
        self._head_timer = None
        if self._reading_head() and (self.cycle is None or self.cycle.response_complete):
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.info("closing the connection of %s: no request head within %gs",
                     client, self.timeout_s)  # fmt: skip
            self.transport.close()
