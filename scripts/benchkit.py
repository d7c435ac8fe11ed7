"""What every bench row is made of: a Row, the Report, and how both are timed and shown."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from envelopes.v1 import RequestLimits, ToolCallRequest, ToolRef


@dataclass
class Row:
    name: str
    unit: str
    median: float
    p95: float
    samples: int
    baseline: str = ""
    baseline_median: float | None = None
    baseline_p95: float | None = None
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    note: str = ""
    #: Anything else a row measured, for the JSON report only (e.g. a CPU split).
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    machine: dict[str, Any]
    rows: list[Row] = field(default_factory=list)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def compared(name: str, ours: list[float], baseline_name: str, theirs: list[float],
             target: float) -> Row:  # fmt: skip
    ratio = statistics.median(ours) / statistics.median(theirs)
    return Row(name, "ms", statistics.median(ours), p95(ours), len(ours), baseline_name,
               statistics.median(theirs), p95(theirs), ratio, f"ratio <= {target:g}",
               ratio <= target)  # fmt: skip


async def timed(action: Callable[..., Awaitable[Any]], *args: Any) -> float:
    started = time.perf_counter()
    await action(*args)
    return (time.perf_counter() - started) * 1000


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return ""
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def render(report: Report) -> str:
    lines = ["agents-runner bench: " + ", ".join(f"{k} {v}" for k, v in report.machine.items())]
    head = ("row", "unit", "median", "p95", "n", "baseline", "median", "p95", "ratio", "target")
    table = [head]
    for r in report.rows:
        verdict = "" if r.met is None else (" ok" if r.met else " MISSED")
        table.append((r.name, r.unit, fmt(r.median), fmt(r.p95), str(r.samples), r.baseline,
                      fmt(r.baseline_median), fmt(r.baseline_p95),
                      "" if r.ratio is None else f"{r.ratio:.3f}", r.target + verdict))  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    lines += [f"  {r.name.strip()}: {r.note}" for r in report.rows if r.note]
    return "\n".join(lines)


def request(
    tool: str, arguments: dict[str, Any], n: int = 0, deadline_s: float = 60
) -> ToolCallRequest:
    """A v1 request for `tool` with id bench-`n`, due in `deadline_s`."""
    return ToolCallRequest(
        id=f"bench-{n}", tool=ToolRef(name=tool), arguments=arguments,
        deadline_ms=int((time.time() + deadline_s) * 1000),
        limits=RequestLimits(max_result_bytes=65536),
    )  # fmt: skip
