"""envelopes.events: the RS-framed lines, their strict parsing, and the Emitter's budget
(rate by coalescing, bytes then one `dropped`), written to a real pipe."""

from __future__ import annotations

import fcntl
import os
import select
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from envelopes import events, wire
from envelopes.events import Emitter, LineStreams, encode, parse_line
from envelopes.v1 import StreamEvent

F_SETPIPE_SZ = 1031  # Linux; fcntl names it from Python 3.10 on some builds only


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Pipe:
    """The read end of a real pipe the emitter writes to, read without blocking."""

    def __init__(self) -> None:
        self.read_fd, self.fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        fcntl.fcntl(self.fd, F_SETPIPE_SZ, 1 << 20)  # the tests read after writing
        self.buffer = b""

    def lines(self) -> list[bytes]:
        while True:
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            self.buffer += chunk
        *done, self.buffer = self.buffer.split(b"\n")
        return [line + b"\n" for line in done]

    def events(self) -> list[dict]:
        parsed = [parse_line(line) for line in self.lines()]
        assert all(isinstance(p, dict) for p in parsed), parsed
        return parsed  # type: ignore[return-value]

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.fd)


@pytest.fixture
def pipe() -> Iterator[Pipe]:
    p = Pipe()
    yield p
    p.close()


# --- framing -------------------------------------------------------------------------


def test_an_event_is_rs_compact_json_lf() -> None:
    line = encode({"type": "log", "stream": "stdout", "text": "two\nlines \x1b[31m"})
    assert line == b'\x1e{"type":"log","stream":"stdout","text":"two\\nlines \\u001b[31m"}\n'
    assert line.count(b"\n") == 1 and b"\x1b" not in line
    assert parse_line(line) == {"type": "log", "stream": "stdout", "text": "two\nlines \x1b[31m"}


GOOD_EVENTS = [
    {"type": "log", "stream": "stderr", "text": ""},
    {"type": "log", "stream": "stdout", "text": "x" * 8192},
    {"type": "progress", "fraction": 0},
    {"type": "progress", "fraction": 1.0, "message": "done"},
    {"type": "progress", "fraction": 0.25, "message": "m" * 1024},
    {"type": "partial", "text": "tok"},
    {"type": "dropped", "count": 3},
]
BAD_LINES = {
    b'{"type":"partial","text":"x"}\n': "does not start with RS",
    b'\x1e{"type":"partial","text":"x"}': "does not end with LF",
    b'\x1e{"type":"partial","text":"x"}\n\x1e{"type":"partial","text":"y"}\n': "more than one",
    b'\x1e{"type":"partial","text":"x","extra":1}\n': "unknown member 'extra'",
    b'\x1e{"type":"shout","text":"x"}\n': "event type",
    b'\x1e{"text":"x"}\n': "event type",
    b'\x1e{"type":"log","stream":"stdin","text":"x"}\n': "stream",
    b'\x1e{"type":"log","stream":"stdout"}\n': "text: expected a string",
    b'\x1e{"type":"partial","text":"' + b"x" * 8193 + b'"}\n': "over 8192",
    b'\x1e{"type":"progress","fraction":1.5}\n': "fraction",
    b'\x1e{"type":"progress","fraction":-0.1}\n': "fraction",
    b'\x1e{"type":"progress","fraction":true}\n': "fraction",
    b'\x1e{"type":"progress","fraction":"0.5"}\n': "fraction",
    b'\x1e{"type":"progress","fraction":0.5,"message":7}\n': "message",
    b'\x1e{"type":"progress","fraction":0.5,"message":"' + b"m" * 1025 + b'"}\n': "message",
    b'\x1e{"type":"dropped","count":0}\n': "count",
    b'\x1e{"type":"dropped","count":true}\n': "count",
    b'\x1e{"type":"dropped","count":1.0}\n': "count",
    b'\x1e{"type":"partial","text":"a","text":"b"}\n': "duplicate key",
    b'\x1e{"type":"progress","fraction":NaN}\n': "not strict JSON",
    b'\x1e{"type":"partial","text":["nested"]}\n': "nesting",
    b'\x1e["type","partial"]\n': "not strict JSON",
    b'\x1e{"type":"partial","text":"\xff"}\n': "invalid UTF-8",
    b'\x1e{"type":"partial","text":"' + b"x" * 16400 + b'"}\n': "over 16384",
}


@pytest.mark.parametrize("event", GOOD_EVENTS, ids=lambda e: e["type"])
def test_good_events_round_trip(event: dict) -> None:
    assert parse_line(encode(event)) == event


@pytest.mark.parametrize(("line", "why"), BAD_LINES.items(), ids=lambda v: repr(v)[:40])
def test_bad_lines_are_refused_with_the_reason(line: bytes, why: str) -> None:
    problem = parse_line(line)
    assert isinstance(problem, str) and why in problem, problem


@pytest.mark.parametrize("line", [encode(e) for e in GOOD_EVENTS] + list(BAD_LINES))
def test_the_event_model_gives_the_same_verdict(line: bytes) -> None:
    parsed = parse_line(line)
    body = line[1:-1] if line.startswith(b"\x1e") and line.endswith(b"\n") else None
    try:
        assert body is not None and len(line) <= events.MAX_LINE_BYTES and b"\n" not in body
        StreamEvent.model_validate(wire.loads(body, max_bytes=len(body)))
        model_ok = True
    except (AssertionError, ValueError, ValidationError):
        model_ok = False
    assert model_ok == isinstance(parsed, dict)


# --- the budget ----------------------------------------------------------------------


def test_lines_go_at_once_while_the_rate_allows(pipe: Pipe) -> None:
    clock = Clock()
    emitter = Emitter(max_per_second=20, fd=pipe.fd, timer=False, clock=clock)
    for n in range(10):  # the burst: max_per_second // 2
        emitter.log(f"line {n}\n", "stdout")
    assert [e["text"] for e in pipe.events()] == [f"line {n}" for n in range(10)]


def test_lines_past_the_rate_are_coalesced_into_one_event(pipe: Pipe) -> None:
    clock = Clock()
    emitter = Emitter(max_per_second=2, fd=pipe.fd, timer=False, clock=clock)
    for text in ("a", "b", "c"):
        emitter.log(text, "stdout")
    emitter.log("e1", "stderr")
    emitter.progress(0.1)
    emitter.progress(0.2, "newest wins")
    assert pipe.events() == [{"type": "log", "stream": "stdout", "text": "a"}]
    clock.now += 0.5  # one token
    emitter.flush()
    assert pipe.events() == [{"type": "log", "stream": "stdout", "text": "b\nc"}]
    clock.now += 1.0  # the bucket holds one token at most (burst max_per_second // 2)
    emitter.flush()
    assert pipe.events() == [{"type": "log", "stream": "stderr", "text": "e1"}]
    clock.now += 0.5
    emitter.flush()
    assert pipe.events() == [{"type": "progress", "fraction": 0.2, "message": "newest wins"}]
    assert emitter.dropped == 0


def test_the_rate_holds_over_a_flood(pipe: Pipe) -> None:
    """10 s of 1000 lines a second at max_per_second=20: a token bucket with the
    runner's burst (20) never runs dry, and no line is lost (they are coalesced)."""
    clock = Clock()
    emitter = Emitter(max_per_second=20, max_bytes=8 << 20, fd=pipe.fd, timer=False, clock=clock)
    tokens, last, texts = 20.0, clock.now, []
    for n in range(10_000):
        clock.now += 0.001
        emitter.log(f"{n}", "stdout")
        for event in pipe.events():
            tokens = min(20.0, tokens + (clock.now - last) * 20)
            last = clock.now
            assert tokens >= 1.0, f"the runner would drop event {len(texts)}"
            tokens -= 1.0
            texts.append(event["text"])
    clock.now += 1.0
    emitter.close(wait=0)
    texts += [e["text"] for e in pipe.events()]
    assert len(texts) <= 10 + 20 * 10 + 1
    assert "\n".join(texts).split("\n") == [str(n) for n in range(10_000)]


def test_past_max_bytes_lines_are_dropped_then_counted_once(pipe: Pipe) -> None:
    clock = Clock()
    emitter = Emitter(max_per_second=1000, max_bytes=400, fd=pipe.fd, timer=False, clock=clock)
    for n in range(50):
        emitter.log(f"line number {n}", "stdout")
    emitter.close()
    lines = pipe.lines()
    assert sum(len(line) for line in lines) <= 400
    parsed = [parse_line(line) for line in lines]
    assert parsed[-1] == {"type": "dropped", "count": 50 - (len(parsed) - 1)}
    assert [e["text"] for e in parsed[:-1]] == [f"line number {n}" for n in range(len(lines) - 1)]


def test_a_budget_too_small_for_any_event_writes_nothing(pipe: Pipe) -> None:
    emitter = Emitter(max_bytes=1, fd=pipe.fd, timer=False)
    emitter.log("x")
    emitter.close()
    assert pipe.lines() == [] and emitter.dropped == 1


def test_long_text_is_split_into_lines_a_pipe_keeps_whole(pipe: Pipe) -> None:
    emitter = Emitter(max_per_second=1000, max_bytes=8 << 20, fd=pipe.fd, timer=False)
    text = "".join(chr(0x20 + n % 90) + "\x01é" for n in range(6000))  # escapes and UTF-8
    emitter.log(text, "stderr")
    emitter.partial("p" * 10_000)
    emitter.close()
    lines = pipe.lines()
    assert all(len(line) <= events.WRITE_LINE_BYTES for line in lines)
    parsed = [parse_line(line) for line in lines]
    assert "".join(e["text"] for e in parsed if e["type"] == "log") == text
    assert "".join(e["text"] for e in parsed if e["type"] == "partial") == "p" * 10_000


def test_text_is_made_sendable(pipe: Pipe) -> None:
    emitter = Emitter(fd=pipe.fd, timer=False)
    emitter.log("lone \udc80 surrogate")
    emitter.progress(0.5, "m" * 5000)
    assert pipe.events() == [
        {"type": "log", "stream": "stderr", "text": "lone ? surrogate"},
        {"type": "progress", "fraction": 0.5, "message": "m" * 1024},
    ]
    with pytest.raises(ValueError, match="fraction"):
        emitter.progress(1.5)
    with pytest.raises(ValueError, match="stream"):
        emitter.log("x", "stdin")


def test_the_timer_thread_sends_what_waits_without_another_call(pipe: Pipe) -> None:
    emitter = Emitter(max_per_second=2, fd=pipe.fd)  # burst 1: the second line waits
    emitter.log("first")
    emitter.log("second")
    assert [e["text"] for e in pipe.events()] == ["first"]
    ready, _, _ = select.select([pipe.read_fd], [], [], 30)  # a hang guard, not a timing
    assert ready
    assert [e["text"] for e in pipe.events()] == ["second"]
    emitter.close()
    emitter.log("after close")
    assert pipe.lines() == [] and emitter.dropped == 1


def test_close_sends_what_is_pending_and_counts_what_it_could_not(pipe: Pipe) -> None:
    clock = Clock()
    emitter = Emitter(max_per_second=1, fd=pipe.fd, timer=False, clock=clock)
    emitter.log("a")
    emitter.log("b", "stdout")
    emitter.close(wait=0)  # no token for "b" within the wait
    assert pipe.events() == [
        {"type": "log", "stream": "stderr", "text": "a"},
        {"type": "dropped", "count": 1},
    ]


def test_the_null_emitter_does_nothing() -> None:
    null = events.NULL
    null.log("x")
    null.progress(2.0)  # not even checked: there is nowhere to send it
    null.partial("x")
    null.close()
    assert not null.enabled and not null.accepts()


# --- a child's output as lines -------------------------------------------------------


def test_line_streams_split_decode_and_hold_partial_lines(pipe: Pipe) -> None:
    clock = Clock()
    emitter = Emitter(max_per_second=1000, fd=pipe.fd, timer=False, clock=clock)
    streams = LineStreams(emitter, hold=0.1, clock=clock)
    streams.feed("stdout", b"hel")
    streams.feed("stdout", b"lo\r\nwor")
    streams.feed("stderr", b"caf\xc3")  # a character cut between two reads
    streams.feed("stderr", b"\xa9 \xff\n")
    assert [(e["stream"], e["text"]) for e in pipe.events()] == [
        ("stdout", "hello"),
        ("stderr", "café \ufffd"),
    ]
    assert streams.due() == pytest.approx(0.1)
    streams.tick()
    assert pipe.events() == []
    clock.now += 0.1
    streams.tick()  # "wor" waited long enough: it goes as it is
    assert [e["text"] for e in pipe.events()] == ["wor"]
    streams.feed("stdout", b"ld\nend")
    streams.finish()
    assert [e["text"] for e in pipe.events()] == ["ld", "end"]
    assert streams.due() is None


def test_line_streams_count_a_flood_instead_of_decoding_it(pipe: Pipe) -> None:
    emitter = Emitter(max_per_second=1000, max_bytes=200, fd=pipe.fd, timer=False)
    streams = LineStreams(emitter)
    streams.feed("stdout", b"x\n" * 1000)
    streams.feed("stdout", b"y\n" * 1000 + b"tail")
    streams.finish()
    emitter.close()
    parsed = [parse_line(line) for line in pipe.lines()]
    sent = [e for e in parsed if e["type"] == "log"]
    assert parsed[-1] == {"type": "dropped", "count": 2001 - len(sent)}


def test_under_a_flood_the_newest_lines_are_kept(pipe: Pipe) -> None:
    clock = Clock()
    emitter = Emitter(max_per_second=2, max_bytes=8 << 20, fd=pipe.fd, timer=False, clock=clock)
    streams = LineStreams(emitter, clock=clock)
    total = 200_000
    for start in range(0, total, 10_000):
        streams.feed("stdout", "".join(f"{n}\n" for n in range(start, start + 10_000)).encode())
    streams.feed("stdout", b"\n")  # an empty line is a line too
    for _ in range(100):  # time passes: the pending lines go, one event a token
        clock.now += 1.0
        emitter.flush()
    emitter.close(wait=0)
    parsed = [parse_line(line) for line in pipe.lines()]
    lines = [line for e in parsed if e["type"] == "log" for line in e["text"].split("\n")]
    numbers = [int(line) for line in lines[:-1]]
    assert lines[-1] == "" and numbers == sorted(set(numbers))  # in order, none twice
    assert numbers[0] == 0  # the first line went at once, then the rate ran out
    tail = numbers[-2000:]
    assert tail == list(range(total - 2000, total)), "the newest lines are the ones kept"
    assert parsed[-1] == {"type": "dropped", "count": total + 1 - len(lines)}
