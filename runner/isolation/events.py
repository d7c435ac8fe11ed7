"""Live output of a running call: the events a worker frames on its stderr.

Envelope 1.1 (docs/envelope-v1.md, "Events"): one event is one stderr line made of the
byte 0x1E (RS), one strict JSON object and LF, at most 16384 bytes in all. Every other
stderr line is a plain log line and stays in the stderr tail, unparsed. A runner reads
events only for a request that carried `events`; without it, stderr is read as in 1.0.

`EventReader` does that reading for one call. Fed stderr chunks as they arrive (by the
local runner on the event loop, by the Docker runner's stream thread), it returns the
plain bytes, and for every complete event line: checks it (invalid or over-long lines
are dropped and counted in `invalid`), enforces the budget (a token bucket of
`max_per_second` with a burst of as many, `max_bytes` of event lines, and at most
MAX_DELIVERED events per call; lines past it are dropped and counted in `dropped`),
escapes control and bidi characters in the text, numbers the event and hands it to the
callback at once: nothing waits for the worker's exit. It keeps the last KEPT_EVENTS
events and the last TAIL_CHARS characters of log and partial text (a killed call's
`error.output_tail`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import anyio.from_thread
import anyio.lowlevel

from envelopes import events as wire_events
from envelopes.controls import escape_controls
from envelopes.rules import (
    EVENT_MAX_LINE_BYTES,
    EVENT_RECORD_SEPARATOR,
    EVENTS_MAX_DELIVERED,
    OUTPUT_TAIL_MAX,
)
from envelopes.v1 import EventBudget

logger = logging.getLogger(__name__)

#: The byte that starts an event line (ASCII record separator).
RS = EVENT_RECORD_SEPARATOR[0]
#: Longest event line, RS and LF included.
MAX_LINE_BYTES = EVENT_MAX_LINE_BYTES
#: Events delivered per call at most; later ones are dropped.
MAX_DELIVERED = EVENTS_MAX_DELIVERED
#: Events an outcome keeps (the last ones delivered).
KEPT_EVENTS = 32
#: Characters of streamed log/partial text kept for `error.output_tail`.
TAIL_CHARS = OUTPUT_TAIL_MAX

EventType = Literal["log", "progress", "partial"]
Stream = Literal["stdout", "stderr"]


@dataclass(frozen=True)
class WorkerEvent:
    """One event a worker streamed, as the runner delivers it (text already escaped)."""

    call_id: str  # the request's id
    seq: int  # 1, 2, ... per call, delivered events only
    at_ms: int  # the runner's receipt time, epoch ms
    type: EventType
    text: str = ""  # log/partial text, or progress message; escaped
    stream: Stream | None = None  # log only
    fraction: float | None = None  # progress only

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"call_id": self.call_id, "seq": self.seq, "at_ms": self.at_ms,
                               "type": self.type, "text": self.text}  # fmt: skip
        if self.stream is not None:
            doc["stream"] = self.stream
        if self.fraction is not None:
            doc["fraction"] = self.fraction
        return doc


#: Called once per delivered event, on the event loop; it must not block.
EventCallback = Callable[[WorkerEvent], None]


class InvalidEvent(ValueError):
    """An event line that is not one of the closed event objects."""


def parse_event(line: bytes) -> dict[str, Any]:
    """The event object of one line (RS and JSON, without its LF); InvalidEvent if the
    line is not exactly one of the closed event objects (envelopes.events' rules)."""
    event = wire_events.parse_line(line + b"\n")
    if isinstance(event, str):
        raise InvalidEvent(event)
    return event


class _TokenBucket:
    """`rate` tokens a second, at most `rate` held (the burst)."""

    def __init__(self, rate: int, clock: Callable[[], float]) -> None:
        self.rate = float(rate)
        self.tokens = float(rate)
        self.clock = clock
        self.last = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.rate, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


_START, _PLAIN, _EVENT, _SKIP = range(4)


class EventReader:
    """Splits one call's stderr into plain log bytes and events (see the module's doc).

    Not thread-safe: one reader is fed from one place at a time. `deliver` receives each
    event as soon as its line is complete; should it raise, the error is logged and no
    more events are delivered to it (they are still counted and kept).
    """

    def __init__(
        self,
        call_id: str,
        budget: EventBudget | None = None,
        deliver: EventCallback | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.call_id = call_id
        self.budget = budget or EventBudget()
        self._deliver = deliver
        self._wall_ms = wall_ms
        self._bucket = _TokenBucket(self.budget.max_per_second, monotonic)
        self._state = _START
        self._line = bytearray()
        self._event_bytes = 0
        self.delivered = 0
        self.dropped = 0
        self.invalid = 0
        self.events: deque[WorkerEvent] = deque(maxlen=KEPT_EVENTS)
        self._tail: deque[str] = deque()
        self._tail_chars = 0

    def close(self) -> None:
        """Deliver nothing more (the call is over, or was cancelled)."""
        self._deliver = None

    def from_thread(self) -> EventReader:
        """This reader, to be fed from a worker thread from now on: each event reaches
        the callback on the event loop of the task calling this (the thread waits until
        it has run). Call it on the event loop."""
        deliver = self._deliver
        if deliver is not None:
            token = anyio.lowlevel.current_token()

            def on_loop(event: WorkerEvent) -> None:
                anyio.from_thread.run_sync(deliver, event, token=token)

            self._deliver = on_loop
        return self

    def feed(self, chunk: bytes) -> bytes:
        """Consume a stderr chunk; return its plain (non-event) bytes."""
        plain = bytearray()
        index, size = 0, len(chunk)
        while index < size:
            if self._state == _START:
                self._state = _EVENT if chunk[index] == RS else _PLAIN
            newline = chunk.find(b"\n", index)
            end = size if newline < 0 else newline
            if self._state == _PLAIN:
                plain += chunk[index : size if newline < 0 else newline + 1]
            elif self._state == _EVENT:
                self._line += chunk[index:end]
                if len(self._line) + 1 > MAX_LINE_BYTES:  # over-long: skip to its end
                    self._event_bytes += len(self._line)
                    self._line.clear()
                    self.invalid += 1
                    self._state = _SKIP
            else:
                self._event_bytes += end - index
            if newline < 0:
                break
            if self._state == _EVENT:
                self._complete(bytes(self._line))
                self._line.clear()
            elif self._state == _SKIP:
                self._event_bytes += 1
            self._state = _START
            index = newline + 1
        return bytes(plain)

    def finish(self) -> None:
        """The stream ended: an event line without its LF is incomplete, so invalid."""
        if self._state == _EVENT and self._line:
            self.invalid += 1
            self._event_bytes += len(self._line)
        self._line.clear()
        self._state = _START

    def _complete(self, line: bytes) -> None:
        self._event_bytes += len(line) + 1
        try:
            doc = parse_event(line)
        except InvalidEvent as exc:
            self.invalid += 1
            if self.invalid == 1:  # one line per call is enough to diagnose a worker
                logger.info("call %s: invalid event line dropped: %s", self.call_id, exc)
            return
        if doc["type"] == "dropped":  # the worker's own count of what it dropped
            self.dropped += doc["count"]
            return
        if (
            self._event_bytes > self.budget.max_bytes
            or self.delivered >= MAX_DELIVERED
            or not self._bucket.take()
        ):
            self.dropped += 1
            return
        self.delivered += 1
        event = _event_of(doc, self.call_id, self.delivered, self._wall_ms())
        self.events.append(event)
        if event.type != "progress":
            self._keep_text(event.text if event.type == "partial" or event.text.endswith("\n")
                            else event.text + "\n")  # fmt: skip
        deliver = self._deliver
        if deliver is not None:
            try:
                deliver(event)
            except Exception:
                logger.exception("call %s: the event callback raised; no more events are"
                                 " delivered to it", self.call_id)  # fmt: skip
                self._deliver = None

    def _keep_text(self, text: str) -> None:
        self._tail.append(text)
        self._tail_chars += len(text)
        while self._tail_chars - len(self._tail[0]) >= TAIL_CHARS:
            self._tail_chars -= len(self._tail.popleft())

    def output_tail(self) -> str:
        """The last TAIL_CHARS characters of the log and partial text delivered."""
        return "".join(self._tail)[-TAIL_CHARS:]


def _event_of(doc: dict[str, Any], call_id: str, seq: int, at_ms: int) -> WorkerEvent:
    kind = doc["type"]
    if kind == "progress":
        fraction = float(doc["fraction"])
        message = escape_controls(doc.get("message", ""), multiline=True)
        return WorkerEvent(call_id, seq, at_ms, "progress", message, fraction=fraction)
    if kind == "log":
        return WorkerEvent(
            call_id, seq, at_ms, "log", escape_controls(doc["text"], multiline=True), doc["stream"]
        )
    return WorkerEvent(call_id, seq, at_ms, "partial", escape_controls(doc["text"], multiline=True))
