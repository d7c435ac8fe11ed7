"""The `bodies` bench rows: what a hostile JSON body costs (issue 23, finding 1).

Parse rows: envelopes.wire.loads on the worst shapes found (deep long keys around a wide
array of zeros, many small objects, many short strings, lists of lists), each about 2 MB
and under wire.MAX_VALUES so it is read in full, plus one 15 MB body past MAX_VALUES that
is refused. Seconds per MiB and peak memory per MiB (tracemalloc's peak of a second parse), each
sample in a fresh process, against json.loads of the same bytes, sample for sample, in
the same run.

Server row: `/healthz` latency on a real `agents-runner serve` on loopback while hostile
bodies arrive (with no token, a wrong one and the operator's), against idle `/healthz`
latency in the same run."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from bench_server import TOKEN, serve_on_loopback
from benchkit import Report, Row, p95

MiB = 1 << 20
SIZE = 2_000_000

#: One sample: parse the file with `wire` or `json`, timed; then again under tracemalloc
#: for its peak (Python's allocations, every byte of them); print both.
_SAMPLE = """\
import gc, json, sys, time, tracemalloc
from envelopes import wire
data = open(sys.argv[1], "rb").read()
def parse():
    try:
        json.loads(data) if sys.argv[2] == "json" else wire.loads(data, max_bytes=len(data))
    except wire.WireError:
        pass
started = time.perf_counter()
parse()
seconds = time.perf_counter() - started
gc.collect()
tracemalloc.start()
parse()
print(json.dumps([seconds, tracemalloc.get_traced_memory()[1]]))
"""


def deep_keys(size: int, depth: int = 62) -> bytes:
    """`depth` nested objects with 40-character keys around a list of zeros."""
    keys = [f"k{level:02d}".ljust(40, "x") for level in range(depth)]
    opening = "".join(f'{{"{key}":' for key in keys).encode()
    zeros = (size - len(opening) - depth - 2) // 2
    return opening + b"[" + b"0," * (zeros - 1) + b"0]" + b"}" * depth


def many(item: bytes, size: int) -> bytes:
    return b'{"a":[' + b",".join([item] * (size // (len(item) + 1))) + b"]}"


SHAPES: dict[str, Callable[[], bytes]] = {
    "deep long keys around a wide array": lambda: deep_keys(SIZE),
    "many small objects": lambda: many(b'{"a":1}', SIZE),
    "many short strings": lambda: many(b'"ab"', SIZE),
    "lists of lists": lambda: many(b"[[]]", SIZE),
    "15 MB of empty objects (refused)": lambda: many(b"{}", 15_000_000),
}


def sample(path: Path, parser: str) -> tuple[float, float]:
    """(seconds per MiB, peak MB per MiB) of one parse in a fresh process."""
    done = subprocess.run([sys.executable, "-c", _SAMPLE, str(path), parser], check=True,
                          capture_output=True, text=True)  # fmt: skip
    seconds, peak = json.loads(done.stdout)
    mib = path.stat().st_size / MiB
    return seconds / mib, peak / 1e6 / mib


def parse_rows(report: Report, directory: Path, samples: int = 5) -> None:
    for name, make in SHAPES.items():
        path = directory / "body.json"
        path.write_bytes(make())
        ours: list[tuple[float, float]] = []
        theirs: list[tuple[float, float]] = []
        for _ in range(samples):  # interleaved: a busy moment slows both alike
            ours.append(sample(path, "wire"))
            theirs.append(sample(path, "json"))
        for index, unit, what in ((0, "s/MiB", "seconds"), (1, "MB/MiB", "peak memory")):
            mine = [s[index] for s in ours]
            base = [s[index] for s in theirs]
            ratio = statistics.median(mine) / statistics.median(base)
            target = 3.0 if index == 0 else 1.5
            report.rows.append(Row(
                f"hostile body: {name}, {what}", unit, statistics.median(mine), p95(mine),
                samples, "json.loads, same bytes", statistics.median(base), p95(base), ratio,
                f"ratio <= {target:g}", ratio <= target,
                note="" if index else f"{path.stat().st_size / 1e6:.1f} MB body",
            ))  # fmt: skip


def healthz_row(report: Report, directory: Path, idle_samples: int = 50) -> None:
    body = deep_keys(SIZE)
    with (serve_on_loopback(directory / "bodies.db", directory) as url,
          httpx.Client(base_url=url, timeout=120) as http):  # fmt: skip
        for _ in range(10):
            http.get("/healthz")
        idle = [latency(http) for _ in range(idle_samples)]

        def flood(authorization: str | None) -> None:
            headers = {"content-type": "application/json"}
            if authorization:
                headers["authorization"] = authorization
            with httpx.Client(base_url=url, timeout=120) as sender:
                for _ in range(4):
                    sender.post("/v1/sessions", content=body, headers=headers)

        senders = [threading.Thread(target=flood, args=(who,), daemon=True)
                   for who in (None, "Bearer wrong", f"Bearer {TOKEN}")]  # fmt: skip
        for sender in senders:
            sender.start()
        loaded: list[float] = []
        while any(sender.is_alive() for sender in senders):
            loaded.append(latency(http))
        for sender in senders:
            sender.join()
    ratio = statistics.median(loaded) / statistics.median(idle)
    report.rows.append(Row(
        "server: /healthz while 2 MB hostile bodies arrive", "ms", statistics.median(loaded),
        p95(loaded), len(loaded), "idle /healthz", statistics.median(idle), p95(idle), ratio,
        note=f"worst {max(loaded):.0f} ms under 3 senders x 4 bodies (no token, a wrong one,"
             f" the operator's), idle worst {max(idle):.1f} ms",
    ))  # fmt: skip


def latency(http: httpx.Client) -> float:
    started = time.perf_counter()
    http.get("/healthz")
    return (time.perf_counter() - started) * 1000


def bench_bodies(report: Report, directory: Path) -> None:
    parse_rows(report, directory)
    healthz_row(report, directory)
