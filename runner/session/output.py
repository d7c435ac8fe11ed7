"""What an isolated call's worker streams while it runs: kept with the call, passed on live.

The engine hands every runner call an `on_event` callback (execute.py). Each event a
worker streams (envelope 1.1 events, runner.isolation.WorkerEvent) then goes two ways:

- `OutputTail` keeps the end of it, bounded (the last KEPT_EVENTS events and at most
  KEPT_TEXT_BYTES of their text, plus the latest progress), and the engine stores that as
  the call's `output` (runner.state.CallOutput) in the commit that stores its result, or
  the one that sets it back to ready when the step yields: no commit of its own, so a
  stream costs the store nothing per event. `session show` prints it after a restart.
- `CallOutputBus.publish` hands it, with the session and call it belongs to, to whoever
  listens to the Engine's bus (`Engine.call_output`; a DurableAgent has its own): the
  server's event stream (`call.output`) and the console.
  Live only: nothing is kept for a listener that subscribes later, and a process that
  did not run the call hears nothing of it (it reads the stored tail once the call ends).

A listener is called in the event loop it subscribed from (through `call_soon_threadsafe`
when the call runs in another one), so it may touch its own loop's objects; it must not
block, and an error it raises is logged and never reaches the call.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from runner.isolation.events import WorkerEvent
from runner.state import CallEvent, CallOutput

logger = logging.getLogger(__name__)

#: Events kept with a call (the last ones of its latest attempt that streamed any).
KEPT_EVENTS = 20
#: UTF-8 bytes of event text kept with a call, over all its kept events.
KEPT_TEXT_BYTES = 8 * 1024


def stored_event(event: WorkerEvent) -> CallEvent:
    """A runner's event as the call's record keeps it (without the request id)."""
    return CallEvent(seq=event.seq, at_ms=event.at_ms, type=event.type, text=event.text,
                     stream=event.stream, fraction=event.fraction)  # fmt: skip


def _end_of(text: str, max_bytes: int) -> str:
    """The longest end of `text` that is at most `max_bytes` in UTF-8."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    return data[len(data) - max_bytes :].decode("utf-8", errors="ignore")


class OutputTail:
    """The bounded end of one attempt's events (see the module)."""

    def __init__(self, attempt: int) -> None:
        self.attempt = attempt
        self.events: deque[CallEvent] = deque()
        self.progress: CallEvent | None = None
        self.delivered = 0
        self._text_bytes = 0

    def add(self, event: WorkerEvent) -> None:
        if event.seq <= self.delivered:  # already kept (see absorb)
            return
        self.delivered = event.seq
        kept = stored_event(event)
        if kept.type == "progress":
            self.progress = kept
        if len(kept.text.encode()) > KEPT_TEXT_BYTES:
            kept = kept.model_copy(update={"text": _end_of(kept.text, KEPT_TEXT_BYTES)})
        self.events.append(kept)
        self._text_bytes += len(kept.text.encode())
        while len(self.events) > KEPT_EVENTS or self._text_bytes > KEPT_TEXT_BYTES:
            self._text_bytes -= len(self.events.popleft().text.encode())

    def absorb(self, events: Iterable[WorkerEvent]) -> None:
        """Events the outcome kept that the callback never saw (a runner that keeps
        them without calling back): those after the last one seen, in order."""
        for event in events:
            self.add(event)

    def record(self, dropped: int = 0, invalid: int = 0) -> CallOutput | None:
        """What the call's `output` becomes; None when the worker streamed nothing."""
        if not self.delivered and not dropped and not invalid:
            return None
        return CallOutput(attempt=self.attempt, events=list(self.events), progress=self.progress,
                          delivered=self.delivered, dropped=dropped, invalid=invalid)  # fmt: skip


@dataclass(frozen=True)
class LiveOutput:
    """One event of a running call, with what it belongs to."""

    session_id: str
    call_id: str  # the session's call id (the request's id is the call's token)
    tool: str
    attempt: int
    event: WorkerEvent

    def to_json(self) -> dict[str, Any]:
        """`session_id`, `call_id`, `tool`, `attempt` and the WorkerEvent's JSON as
        `event` (its `call_id` the session's call id, as above)."""
        return {"session_id": self.session_id, "call_id": self.call_id, "tool": self.tool,
                "attempt": self.attempt,
                "event": {**self.event.to_json(), "call_id": self.call_id}}  # fmt: skip


Listener = Callable[[LiveOutput], None]


class CallOutputBus:
    """The listeners of one process's running calls (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: dict[int, tuple[Listener, asyncio.AbstractEventLoop | None]] = {}
        self._next = 0

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Hear every event published from now on; returns the unsubscribe function."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # no loop here: called wherever the call runs
            loop = None
        with self._lock:
            key, self._next = self._next, self._next + 1
            self._listeners[key] = (listener, loop)

        def unsubscribe() -> None:
            with self._lock:
                self._listeners.pop(key, None)

        return unsubscribe

    def publish(self, item: LiveOutput) -> None:
        with self._lock:
            listeners = list(self._listeners.items())
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        for key, (listener, loop) in listeners:
            if loop is None or loop is here:
                _call(listener, item)
                continue
            try:
                loop.call_soon_threadsafe(_call, listener, item)
            except RuntimeError:  # its loop is closed: it will never listen again
                logger.info("call output: a listener's event loop is closed; dropping it")
                with self._lock:
                    self._listeners.pop(key, None)


def _call(listener: Listener, item: LiveOutput) -> None:
    try:
        listener(item)
    except Exception:
        logger.exception("call output: a listener failed on an event of call %s of session %s",
                         item.call_id, item.session_id)  # fmt: skip


__all__ = ["KEPT_EVENTS", "KEPT_TEXT_BYTES", "CallOutputBus", "LiveOutput",
           "OutputTail", "stored_event"]  # fmt: skip
