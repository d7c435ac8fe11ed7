"""Live events on standard error (envelope 1.1), standard library only.

One event is one line on stderr: the byte RS (0x1E), one compact JSON object, LF. Lines
that do not start with RS are plain logs. `encode(event)` frames one event, `parse_line`
reads one back (strictly, as a runner must), and `Emitter` is what a worker writes with:
it keeps the request's budget (`events.max_per_second`, `events.max_bytes`) by coalescing
lines into one event when they come faster than the rate allows, dropping past the byte
budget, and ending with one `{"type": "dropped", "count": N}` when it dropped anything.
`LineStreams` turns a child process's stdout and stderr bytes into `log` events, line by
line (the bash-runner streams its script this way).

Each event line is written with a single os.write of at most PIPE_BUF bytes, which a pipe
keeps whole, so an event never interleaves with what a tool's own child processes write
to the same stderr. The rate is a token bucket with half the runner's burst, so that
the runner (whose bucket has burst = max_per_second) does not drop what arrives bunched.
"""

from __future__ import annotations

import _thread  # noqa: PLC2701, RUF100 - threading's C half, loaded at start (threading costs imports)
import codecs
import os
import time
from types import MappingProxyType

from envelopes import rules, wire
from envelopes.wire import MAX_SAFE_INTEGER

TYPE_CHECKING = False  # typing costs a fresh process milliseconds; mypy reads it as typing's
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

RS = rules.EVENT_RECORD_SEPARATOR
MAX_LINE_BYTES = rules.EVENT_MAX_LINE_BYTES
TEXT_MAX = rules.EVENT_TEXT_MAX
MESSAGE_MAX = rules.EVENT_MESSAGE_MAX
#: The longest line an Emitter writes: PIPE_BUF, the size a pipe write stays atomic at.
WRITE_LINE_BYTES = 4096
#: Text waiting for the rate, per kind; past it the oldest lines are dropped (and counted),
#: so that under a flood what is shown stays the newest output.
PENDING_MAX_CHARS = 8 * TEXT_MAX
#: Room kept in the byte budget for the final `dropped` event.
_DROPPED_RESERVE = len(b'\x1e{"type":"dropped","count":9007199254740991}\n')
_MEMBERS = MappingProxyType(
    {
        "log": frozenset({"type", "stream", "text"}),
        "progress": frozenset({"type", "fraction", "message"}),
        "partial": frozenset({"type", "text"}),
        "dropped": frozenset({"type", "count"}),
    }
)
_STREAMS = ("stdout", "stderr")


def encode(event: dict[str, Any]) -> bytes:
    """One event line: RS, the object as compact JSON, LF. Raises wire.WireError when the
    object cannot be written as strict JSON."""
    return RS + wire.dumps(event) + b"\n"


def parse_line(line: bytes) -> dict[str, Any] | str:
    """The event on one stderr line (RS ... LF), or why the line is not a valid event:
    over MAX_LINE_BYTES, not strict JSON, an unknown type or member, a value out of
    bounds. Objects are closed, as the envelope's results are."""
    if len(line) > MAX_LINE_BYTES:
        return f"event line is {len(line)} bytes, over {MAX_LINE_BYTES}"
    if not line.startswith(RS):
        return "not an event line (does not start with RS, 0x1E)"
    if not line.endswith(b"\n"):
        return "event line does not end with LF"
    body = line[1:-1]
    if b"\n" in body:
        return "event line holds more than one line"
    try:
        event = wire.loads(body, max_bytes=MAX_LINE_BYTES, max_depth=1)
    except wire.WireError as exc:
        return f"event is not strict JSON: {exc.reason}"
    kind = event.get("type")
    if type(kind) is not str or kind not in _MEMBERS:
        return f"event type: expected one of {', '.join(_MEMBERS)}"
    unknown = sorted(set(event) - _MEMBERS[kind])
    if unknown:
        return f"{kind} event: unknown member {unknown[0][:40]!r}"
    problem = _value_problem(kind, event)
    return event if problem is None else f"{kind} event: {problem}"


def _value_problem(kind: str, event: dict[str, Any]) -> str | None:
    if kind == "log" and event.get("stream") not in _STREAMS:
        return "stream: expected 'stdout' or 'stderr'"
    if kind in ("log", "partial"):
        text = event.get("text")
        if type(text) is not str:
            return "text: expected a string"
        if len(text) > TEXT_MAX:
            return f"text: {len(text)} characters, over {TEXT_MAX}"
    elif kind == "progress":
        fraction: Any = event.get("fraction")
        if type(fraction) not in (int, float) or not 0 <= fraction <= 1:
            return "fraction: expected a number from 0 to 1"
        message = event.get("message")
        if message is not None and (type(message) is not str or len(message) > MESSAGE_MAX):
            return f"message: expected a string of at most {MESSAGE_MAX} characters"
    else:
        count = event.get("count")
        if type(count) is not int or not 1 <= count <= MAX_SAFE_INTEGER:
            return "count: expected a positive integer"
    return None


def _utf8(text: str) -> str:
    """`text` with lone surrogates replaced, so that it can go on the wire."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


class NullEmitter:
    """The emitter of a request without `events`: every call does nothing (and holds
    nothing: one NULL serves every request)."""

    __slots__ = ()
    enabled = False
    dropped = 0

    def log(self, text: str, stream: str = "stderr") -> None:
        """Nothing: the runner does not read events for this call."""

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Nothing: the runner does not read events for this call."""

    def partial(self, text: str) -> None:
        """Nothing: the runner does not read events for this call."""

    def accepts(self, stream: str = "stderr") -> bool:
        return False

    def count_dropped(self, count: int) -> None:
        """Nothing to count."""

    def flush(self) -> None:
        """Nothing pending."""

    def close(self, wait: float = 0.25) -> None:
        """Nothing pending."""


NULL = NullEmitter()


class Emitter:
    """Writes events to `fd` within a budget: at most `max_per_second` events a second
    (token bucket, burst max(1, max_per_second // 2)) and `max_bytes` bytes of lines in all.

    `log`, `progress` and `partial` never block on the rate: what cannot go now waits,
    coalesced per kind (log lines of one stream joined with LF, partial texts joined,
    the latest progress only), and goes as soon as a token is there, from a timer thread
    when `timer` is true (else at the next call or `flush()`). `close()` sends what is
    left, then the `dropped` count. Thread-safe.
    """

    enabled = True

    def __init__(
        self,
        max_per_second: int = rules.EVENTS_DEFAULT_MAX_PER_SECOND,
        max_bytes: int = rules.EVENTS_DEFAULT_MAX_BYTES,
        fd: int = 2,
        *,
        timer: bool = True,
        line_bytes: int = WRITE_LINE_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate = float(max(1, max_per_second))
        self._burst = float(max(1, max_per_second // 2))
        self._tokens = self._burst
        self._clock = clock
        self._stamp = clock()
        self._max_bytes = max_bytes
        self._used = 0
        self._full = max_bytes - _DROPPED_RESERVE <= 0
        self._fd = fd
        self._line_bytes = min(line_bytes, MAX_LINE_BYTES)
        self._timer = timer
        self._timer_running = False
        self._closed = False
        #: kind -> pieces waiting; "stdout"/"stderr" (log), "partial", "progress".
        self._pending: dict[str, list[Any]] = {}
        self._pending_chars: dict[str, int] = {}
        self._lock = _thread.allocate_lock()
        self.dropped = 0
        self.sent = 0

    # --- what a tool calls -----------------------------------------------------------

    def log(self, text: str, stream: str = "stderr") -> None:
        """A log line, or several separated by LF (`stream` "stdout" or "stderr"); one
        trailing LF is dropped."""
        if stream not in _STREAMS:
            raise ValueError(f"stream: expected 'stdout' or 'stderr', got {stream!r}")
        if text.endswith("\n"):
            text = text[:-1]
        self._submit(stream, _utf8(text))

    def partial(self, text: str) -> None:
        """A piece of the tool's output, ahead of the result (pieces are concatenated)."""
        if text:
            self._submit("partial", _utf8(text))

    def progress(self, fraction: float, message: str | None = None) -> None:
        """How far the tool got, 0.0 to 1.0, with an optional short message."""
        if type(fraction) not in (int, float) or not 0 <= fraction <= 1:
            raise ValueError(f"progress fraction must be a number from 0 to 1, got {fraction!r}")
        if message is not None:
            message = _utf8(message)[:MESSAGE_MAX]
        with self._lock:
            if self._closed or self._full:
                self.dropped += 1
                return
            self._pending.pop("progress", None)  # the newest progress replaces the last
            self._pending["progress"] = [(fraction, message)]
            self._pump()

    def accepts(self, stream: str = "stderr") -> bool:
        """Whether anything more can be sent (not closed, not past the byte budget), so
        that a caller with a flood can count lines instead of handing each one over."""
        return not self._closed and not self._full

    def count_dropped(self, count: int) -> None:
        """Count `count` events the caller dropped itself (see accepts())."""
        with self._lock:
            self.dropped += count

    def flush(self) -> None:
        """Send what the rate allows now."""
        with self._lock:
            self._pump()

    def close(self, wait: float = 0.25) -> None:
        """Send what is pending, waiting at most `wait` seconds for the rate, count the
        rest as dropped, and write the `dropped` event when anything was dropped."""
        give_up = self._clock() + wait
        rounds = int(wait * self._rate) + 2  # bounded even if the clock stands still
        while True:
            rounds -= 1
            with self._lock:
                self._pump()
                delay = self._delay()
                if delay is None or self._clock() + delay > give_up or rounds <= 0:
                    self.dropped += sum(_count(k, p) for k, p in self._pending.items())
                    self._pending.clear()
                    self._pending_chars.clear()
                    self._closed = True
                    break
            time.sleep(delay)
        if self.dropped:
            line = encode({"type": "dropped", "count": min(self.dropped, MAX_SAFE_INTEGER)})
            with self._lock:
                if self._used + len(line) <= self._max_bytes:
                    self._write(line)

    # --- the budget --------------------------------------------------------------------

    def _submit(self, kind: str, text: str) -> None:
        with self._lock:
            if self._closed or self._full:
                self.dropped += _count(kind, [text])
                return
            if len(text) > PENDING_MAX_CHARS:  # keep the end, as for older lines below
                self.dropped += _count(kind, [text[:-PENDING_MAX_CHARS]])
                text = text[-PENDING_MAX_CHARS:]
            pieces = self._pending.setdefault(kind, [])
            pieces.append(text)
            chars = self._pending_chars.get(kind, 0) + len(text)
            while chars > PENDING_MAX_CHARS:
                oldest = pieces.pop(0)
                chars -= len(oldest)
                self.dropped += _count(kind, [oldest])
            self._pending_chars[kind] = chars
            self._pump()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now

    def _delay(self) -> float | None:
        """Seconds until the next pending event may go (0 when now), None if none waits."""
        if not self._pending:
            return None
        self._refill()
        return max(0.0, (1.0 - self._tokens) / self._rate)

    def _pump(self) -> None:
        """Send pending events, oldest kind first, while there are tokens (lock held)."""
        self._refill()
        while self._pending and self._tokens >= 1.0:
            waiting = sum(_count(kind, pieces) for kind, pieces in self._pending.items())
            line = self._next_line(next(iter(self._pending)))
            if self._used + len(line) > self._max_bytes - _DROPPED_RESERVE:
                self._full = True  # past the byte budget: everything from here is dropped
                self.dropped += waiting
                self._pending.clear()
                self._pending_chars.clear()
                return
            self._write(line)
            self._tokens -= 1.0
        if self._pending and self._timer and not self._timer_running and not self._closed:
            self._timer_running = True
            _thread.start_new_thread(self._run_timer, ())

    def _next_line(self, kind: str) -> bytes:
        """The next event line for `kind`, taken off the pending pieces."""
        pieces = self._pending[kind]
        if kind == "progress":
            del self._pending[kind]
            fraction, message = pieces[0]
            event: dict[str, Any] = {"type": "progress", "fraction": fraction}
            if message is not None:
                event["message"] = message
            line = encode(event)
            while len(line) > self._line_bytes:
                event["message"] = event["message"][: len(event["message"]) // 2]
                line = encode(event)
            return line
        separator = "\n" if kind in _STREAMS else ""
        text = separator.join(pieces)
        head, rest = self._fit(kind, text, separator)
        if rest:
            self._pending[kind] = [rest]
            self._pending_chars[kind] = len(rest)
        else:
            del self._pending[kind]
            self._pending_chars.pop(kind, None)
        return head

    def _fit(self, kind: str, text: str, separator: str) -> tuple[bytes, str]:
        """The longest event for a prefix of `text` that fits TEXT_MAX and line_bytes,
        cut at a line break when one is near, and the rest of the text."""
        cut = min(len(text), TEXT_MAX)
        while True:
            if cut < len(text) and separator:
                at = text.rfind(separator, cut // 2, cut)
                if at > 0:
                    cut = at
            event: dict[str, Any] = {"type": "log", "stream": kind, "text": text[:cut]}
            if kind == "partial":
                event = {"type": "partial", "text": text[:cut]}
            line = encode(event)
            if len(line) <= self._line_bytes or cut <= 1:
                rest = text[cut:]
                if separator and rest.startswith(separator):
                    rest = rest[1:]
                return line, rest
            cut = max(1, cut * (self._line_bytes - 64) // len(line))

    def _write(self, line: bytes) -> None:
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:
            # stderr is gone (the runner closed it): nothing more can reach it, so
            # stop here rather than raise into the tool.
            self._full = True
            self._pending.clear()
            self._pending_chars.clear()
            return
        self._used += len(line)
        self.sent += 1

    def _run_timer(self) -> None:
        while True:
            with self._lock:
                delay = None if self._closed else self._delay()
                if delay is None:
                    self._timer_running = False
                    return
                if delay <= 0:
                    self._pump()
                    continue
            time.sleep(delay)


def _count(kind: str, pieces: list[Any]) -> int:
    """Events `pieces` stand for: a log piece holds one line per LF-separated part."""
    if kind in _STREAMS:
        return sum(piece.count("\n") + 1 for piece in pieces)
    return len(pieces)


class LineStreams:
    """A child's stdout and stderr bytes as `log` events, one per line (before
    coalescing): text is decoded as UTF-8 (invalid bytes replaced), the LF (and a CR
    before it) removed. A line still unterminated after `hold` seconds, or longer than
    an event's text, goes as it is; its continuation then starts a new line."""

    def __init__(
        self,
        emitter: Emitter | NullEmitter,
        hold: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.emitter = emitter
        self.hold = hold
        self._clock = clock
        self._decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in _STREAMS}
        self._held = dict.fromkeys(_STREAMS, "")
        self._since: dict[str, float | None] = dict.fromkeys(_STREAMS, None)

    def feed(self, stream: str, data: bytes) -> None:
        """Bytes the child wrote on `stream` ("stdout" or "stderr")."""
        window = 4 * PENDING_MAX_CHARS  # bytes enough for the newest pending lines
        if not self.emitter.accepts(stream):
            window = 0  # past the byte budget: count lines, decode nothing
        if len(data) > window:
            # Lines ending before the window would only be dropped: count them in the
            # bytes instead of decoding them, and start over at the last LF before it.
            end = data.rfind(b"\n", 0, len(data) - window)
            if end >= 0:
                self.emitter.count_dropped(data.count(b"\n", 0, end + 1))
                self._decoders[stream].reset()
                self._held[stream], self._since[stream] = "", None
                data = data[end + 1 :]
        text = self._held[stream] + self._decoders[stream].decode(data)
        end = text.rfind("\n")
        body, held = ("", text) if end < 0 else (text[:end], text[end + 1 :])
        if end >= 0:
            if len(body) > PENDING_MAX_CHARS:
                # Only the newest lines a pending buffer holds: count the older ones.
                cut = body.find("\n", len(body) - PENDING_MAX_CHARS)
                dropped = body.count("\n", 0, cut + 1) if cut >= 0 else 0
                self.emitter.count_dropped(dropped)
                body = body[cut + 1 :] if cut >= 0 else body[-PENDING_MAX_CHARS:]
            if "\r" in body:
                body = body.replace("\r\n", "\n").removesuffix("\r")
            # All of a read's lines as one piece (log() takes one LF off): a flood costs
            # a call per read, not one per line.
            self.emitter.log(body + "\n", stream)
        while len(held) >= TEXT_MAX:
            self.emitter.log(held[:TEXT_MAX], stream)
            held = held[TEXT_MAX:]
        self._held[stream] = held
        if not held:
            self._since[stream] = None
        elif self._since[stream] is None or end >= 0:
            self._since[stream] = self._clock()

    def due(self) -> float | None:
        """Seconds until a held partial line must go, or None when none is held."""
        waiting = [since for since in self._since.values() if since is not None]
        if not waiting:
            return None
        return max(0.0, min(waiting) + self.hold - self._clock())

    def tick(self) -> None:
        """Send the partial lines held for `hold` seconds or more."""
        now = self._clock()
        for stream, since in self._since.items():
            if since is not None and now >= since + self.hold:
                self._send_held(stream)

    def finish(self) -> None:
        """The child is done: send what is held, including an incomplete character."""
        for stream in _STREAMS:
            self._held[stream] += self._decoders[stream].decode(b"", final=True)
            self._send_held(stream)

    def _send_held(self, stream: str) -> None:
        held = self._held[stream]
        if held:
            self.emitter.log(held[:-1] if held.endswith("\r") else held, stream)
        self._held[stream], self._since[stream] = "", None
