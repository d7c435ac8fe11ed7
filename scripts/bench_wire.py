"""scripts/bench's `wire` rows: what driving CPython's `_json` directly (envelopes.wire)
saves a worker over the plain `json` package (issue 25, item 5: keep `_json` only if it
saves more than 1 ms of worker start).

- worker start: a fresh `python -I -B` that imports envelopes.worker, registers a tool and
  answers one ToolCallRequest (the SDK's fast path), timed from its first line to the
  answer, against the same with the `json` package imported first: the modules a reader
  on plain `json` loads (its scanner and encoder are the same C code, so the import is
  the whole difference at start). Here, and inside the python-runner image when it is
  built (its interpreter has not loaded `re`, which `json.decoder` imports).
- a request's parse, in one process: wire.loads against json.loads with the same strict
  hooks (duplicate keys, non-finite numbers), sample for sample.

Each row's ratio is ours over the plain-json one in the same run; the saving (the
difference of the medians) is in the note, with the verdict against the 1 ms rule.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Any

from benchkit import Report, Row, p95

from envelopes import wire

PYTHON_IMAGE = "agents-runner/python-runner:latest"
#: The saving below which envelopes.wire should use the plain `json` package instead.
RULE_MS = 1.0

#: One fresh worker: argv[1] is `wire` (as shipped) or `json` (the json package first).
_START = r"""
import sys, time
started = time.perf_counter()
if sys.argv[1] == "json":
    import json
from envelopes.worker import Worker
worker = Worker("bench", "1.0.0")
@worker.tool("echo", description="", input_schema={"type": "object"}, effects="none")
def echo(arguments, request):
    return arguments
answer = worker.answer(sys.stdin.buffer.read())
assert not answer.failed, answer.payload
print((time.perf_counter() - started) * 1000)
"""

#: The request both the start and the parse rows read.
REQUEST = json.dumps(
    {
        "kind": "ToolCallRequest",
        "version": "1.0",
        "id": "bench-1",
        "tool": {"name": "echo"},
        "arguments": {"text": "hello " * 40, "items": list(range(50)), "flag": True},
        "deadline_ms": 4_102_444_800_000,
        "limits": {"max_result_bytes": 65536},
        "context": {"session_id": "s-1", "call_id": "c-1", "attempt": 1},
    },
    separators=(",", ":"),
).encode()


def _start_samples(argv: list[str], samples: int) -> dict[str, list[float]]:
    """Milliseconds from a worker's first line to its answer, both variants interleaved."""
    times: dict[str, list[float]] = {"wire": [], "json": []}
    for n in range(samples + 1):  # the first round warms the page cache and is not counted
        for variant, spent in times.items():
            done = subprocess.run(
                [*argv, variant], input=REQUEST, capture_output=True, check=False, timeout=120
            )
            if done.returncode != 0:
                raise SystemExit(f"bench: the wire start sample failed: {done.stderr[-500:]!r}")
            if n:
                spent.append(float(done.stdout.split()[-1]))
    return times


def _row(name: str, ours: list[float], baseline: str, theirs: list[float]) -> Row:
    mine, plain = statistics.median(ours), statistics.median(theirs)
    saving = plain - mine
    keep = saving > RULE_MS
    return Row(
        name, "ms", mine, p95(ours), len(ours), baseline, plain, p95(theirs), mine / plain,
        target=f"saves > {RULE_MS:g} ms", met=keep,
        note=f"_json saves {saving:.2f} ms here: "
        + ("keep it" if keep else "switch envelopes.wire to plain json"),
        detail={"saving_ms": round(saving, 3)},
    )  # fmt: skip


def _image_has_python_runner() -> bool:
    done = subprocess.run(
        ["docker", "image", "inspect", PYTHON_IMAGE], capture_output=True, check=False
    )
    return done.returncode == 0


def start_rows(report: Report, samples: int = 25) -> None:
    local = _start_samples([sys.executable, "-I", "-B", "-c", _START], samples)
    report.rows.append(
        _row("worker start + one call, envelopes.wire (_json)", local["wire"],
             "the same, json imported", local["json"])
    )  # fmt: skip
    if not _image_has_python_runner():
        return
    python = "/opt/agents-runner/venv/bin/python"
    in_image = ["docker", "run", "--rm", "-i", "--network", "none", "--entrypoint", python,
                PYTHON_IMAGE, "-I", "-B", "-c", _START]  # fmt: skip
    inside = _start_samples(in_image, max(5, samples // 3))
    report.rows.append(
        _row("the same inside python-runner", inside["wire"], "the same, json imported",
             inside["json"])
    )  # fmt: skip


def _plain_loads(data: bytes) -> Any:
    """A strict reader on the public json API: the same hooks as envelopes.wire."""
    return json.loads(
        data,
        object_pairs_hook=_refuse_duplicates,
        parse_constant=_refuse_constant,
    )


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ValueError("duplicate key")
    return found


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_row(report: Report, samples: int = 2000) -> None:
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        wire.loads(REQUEST, max_bytes=len(REQUEST))
        middle = time.perf_counter()
        _plain_loads(REQUEST)
        ended = time.perf_counter()
        ours.append((middle - started) * 1e6)
        theirs.append((ended - middle) * 1e6)
    row = Row(
        f"a request's parse ({len(REQUEST)} bytes), wire.loads", "µs",
        statistics.median(ours), p95(ours), samples, "json.loads, same strict hooks",
        statistics.median(theirs), p95(theirs),
        statistics.median(ours) / statistics.median(theirs),
        note="wire.loads also caps bytes and values, and checks depth and lone surrogates",
    )  # fmt: skip
    report.rows.append(row)


def bench_wire(report: Report) -> None:
    start_rows(report)
    parse_row(report)
