"""The 1.1 checks: which capabilities a worker declares, and whether it keeps to them.

`negotiate` asks describe at version 1.1, as a runner does. A 1.0 worker refuses that
(UNSUPPORTED_VERSION) or answers a 1.0 DescribeResult: it has no capabilities, and every
check here is skipped for it. For a worker declaring `files`, the checks send input files
and `collect` patterns with a fixture call: a harmless pair must come back as media parts
with their `path` and exact bytes, and every hostile name (traversal, NUL, controls,
duplicates, a file another is written through, bad base64, setuid) must be refused before
the tool runs, like the malformed requests (an error at the `required` level, exactly
INVALID_REQUEST at the `strict` level). What a worker writes inside its sandbox is not
observable from here; its answers are. For a worker declaring `events`, a fixture call
with a small budget must stream only valid event lines, within the line cap and the budget.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Mapping
from typing import Any

import anyio
from pydantic import ValidationError

from envelopes import wire
from envelopes.codec import describe_validation_error
from envelopes.events import parse_line
from envelopes.rules import CAPABILITY_EVENTS, CAPABILITY_FILES, EVENT_RECORD_SEPARATOR
from envelopes.v1 import DescribeResult, ToolDescription
from runner.conformance import probes
from runner.conformance.battery import Answer, Battery
from runner.isolation.base import DESCRIBE_MAX_BYTES

_DESCRIBE_1_1 = b'{"kind": "DescribeRequest", "version": "1.1"}'


async def negotiate(battery: Battery, described: DescribeResult | None) -> None:
    """`describe.capabilities`: the worker's answer to describe at 1.1; sets
    `battery.declared` to the capabilities it declares (none for a 1.0 worker)."""
    check_id = "describe.capabilities"
    deadline_ms = int((time.time() + battery.timeout_s) * 1000)
    ex = await battery.runner.exchange(_DESCRIBE_1_1, deadline_ms, DESCRIBE_MAX_BYTES, check_id)
    battery.answers.append(Answer(check_id, ex))
    if ex.intervention is not None or ex.signal is not None or ex.exit_code not in (0, 1):
        how = ex.intervention or (f"signal {ex.signal}" if ex.signal else f"status {ex.exit_code}")
        battery.report.add(check_id, "fail", f"describe at 1.1 did not answer ({how})")
        return
    try:
        doc = wire.loads(ex.stdout, max_bytes=DESCRIBE_MAX_BYTES)
    except wire.WireError as exc:
        battery.report.add(check_id, "fail", f"describe at 1.1: {exc.reason}")
        return
    if doc.get("kind") == "ToolCallResult":
        code = (doc.get("error") or {}).get("code") if isinstance(doc.get("error"), dict) else None
        listed = described is not None and probes.V1_1 in described.supported_versions
        if code == "UNSUPPORTED_VERSION" and not listed:
            battery.report.add(check_id, "pass", "a 1.0 worker: refuses 1.1, no capabilities")
        else:
            battery.report.add(
                check_id,
                "fail",
                f"describe at 1.1 answered {code or 'a result'}"
                + (", yet 1.0 describe lists 1.1 in supported_versions" if listed else ""),
            )
        return
    try:
        result = DescribeResult.model_validate(doc)
    except ValidationError as exc:
        battery.report.add(check_id, "fail", f"invalid DescribeResult: "
                           f"{describe_validation_error(exc)}")  # fmt: skip
        return
    declared = frozenset(result.capabilities or ())
    if ex.exit_code != 0:
        battery.report.add(check_id, "fail", f"a DescribeResult with exit status {ex.exit_code}")
        return
    if result.version != probes.V1_1:
        battery.report.add(check_id, "pass", f"a {result.version} worker: no capabilities")
        return
    if probes.V1_1 not in result.supported_versions:
        battery.report.add(check_id, "fail", "a 1.1 DescribeResult whose supported_versions"
                           f" {result.supported_versions} lacks 1.1")  # fmt: skip
        return
    battery.report.add(
        check_id, "pass", f"1.1; capabilities: {', '.join(sorted(declared)) or 'none'}"
    )
    battery.declared = declared


def _skipped(battery: Battery, capability: str, tool: ToolDescription) -> bool:
    """Record one `skip` for the whole group (id: the capability's name) when the worker
    does not declare it or no fixture lets a call run; True when skipped."""
    if capability not in battery.declared:
        why = f"the worker does not declare the `{capability}` capability"
    elif tool.name not in battery.fixtures:
        why = f"no fixture for {tool.name!r} (--fixture FILE)"
    else:
        return False
    battery.report.add(capability, "skip", why)
    return True


_EVENTS_IDS = ("events.framing", "events.budget")


async def files(battery: Battery, tool: ToolDescription) -> None:
    """The files round trip and the hostile-name battery (skipped without `files`)."""
    if _skipped(battery, CAPABILITY_FILES, tool):
        return
    arguments = battery.fixtures[tool.name]
    nonce = f"{time.time_ns():x}"
    sent, expected = probes.roundtrip_files(nonce)
    document = probes.request(
        "files.roundtrip", tool.name, arguments, version=probes.V1_1, files=sent,
        collect={"patterns": probes.ROUNDTRIP_PATTERNS},
    )  # fmt: skip
    _judge_roundtrip(battery, await battery.send("files.roundtrip", probes.encode(document)),
                     expected)  # fmt: skip
    # Section 9.1: a trailing `**` matches files, at any depth.
    sent, expected = probes.roundtrip_files(f"{nonce}-globstar")
    document = probes.request(
        "files.trailing_globstar", tool.name, arguments, version=probes.V1_1, files=sent,
        collect={"patterns": probes.TRAILING_GLOBSTAR_PATTERNS},
    )  # fmt: skip
    answer = await battery.send("files.trailing_globstar", probes.encode(document))
    _judge_roundtrip(battery, answer, expected, "files.trailing_globstar")

    async def hostile(check_id: str, extra: Mapping[str, Any]) -> None:
        document = probes.request(check_id, tool.name, arguments, version=probes.V1_1, **extra)
        answer = await battery.send(check_id, probes.encode(document))
        battery.expect_refusal(check_id, answer)
        battery.expect_error(f"{check_id}.strict", answer, "INVALID_REQUEST", None, "strict")

    async with anyio.create_task_group() as group:  # the battery's limiter bounds them
        for check_id, extra in probes.HOSTILE_FILES.items():
            group.start_soon(hostile, check_id, extra)


def _judge_roundtrip(
    battery: Battery,
    answer: Answer,
    expected: dict[str, bytes],
    check_id: str = "files.roundtrip",
) -> None:
    result = answer.result
    if result is None or result.status != "ok" or result.output is None:
        battery.report.add(check_id, "fail", f"expected status ok, got {answer.said()}")
        return
    output = result.output.to_wire()
    parts = output.get("parts", []) if output.get("type") == "mixed" else []
    media = [p for p in parts if p.get("type") == "media" and "path" in p]
    returned: dict[str, bytes] = {}
    for part in media:
        try:
            returned[part["path"]] = base64.b64decode(part["base64_data"], validate=True)
        except (binascii.Error, ValueError):
            returned[part["path"]] = b"<bad base64>"
    problems = []
    for path, data in expected.items():
        if path not in returned:
            problems.append(f"{path} did not come back as a media part with `path`")
        elif returned[path] != data:
            problems.append(f"{path} came back with other bytes ({len(returned[path])} bytes)")
    extra = sorted(set(returned) - set(expected))
    if extra:
        problems.append(f"unexpected files collected: {', '.join(extra[:3])}")
    paths = [p["path"] for p in media]
    if not problems and paths != sorted(paths):
        problems.append(f"collected parts not sorted by path: {paths}")
    battery.report.add(
        check_id,
        "fail" if problems else "pass",
        "; ".join(problems)
        or f"{len(expected)} input files (utf-8, base64) collected back intact as media parts",
    )


async def events(battery: Battery, tool: ToolDescription) -> None:
    """A fixture call with a small events budget: framing and budget of what it streams."""
    if _skipped(battery, CAPABILITY_EVENTS, tool):
        return
    document = probes.request(
        "events", tool.name, battery.fixtures[tool.name], version=probes.V1_1,
        events=probes.EVENTS_BUDGET,
    )  # fmt: skip
    answer = await battery.send("events", probes.encode(document))
    if answer.result is None or answer.result.status != "ok":
        for check_id in _EVENTS_IDS:
            battery.report.add(check_id, "fail", f"the call with `events` got {answer.said()}")
        return
    judge_events(battery, answer)


def event_lines(stderr: bytes, truncated: bool) -> list[bytes]:
    """The RS-framed lines of a stderr capture, each with its LF (a last line without one
    is kept as it is: the framing check refuses it). A truncated capture starts inside a
    line, which is left out."""
    lines = stderr.splitlines(keepends=True)
    if truncated and lines:
        lines = lines[1:]
    return [line for line in lines if line.startswith(EVENT_RECORD_SEPARATOR)]


def judge_events(battery: Battery, answer: Answer) -> None:
    ex = answer.exchange
    truncated = ex.stderr_truncated or ex.stderr_bytes > len(ex.stderr_tail)
    lines = event_lines(ex.stderr_tail, truncated)
    invalid: list[str] = []
    counted_bytes = counted = 0
    for number, line in enumerate(lines, 1):
        doc = parse_line(line)  # the envelope's own strict reading of one event line
        if isinstance(doc, str):
            invalid.append(f"event line {number}: {doc}")
            continue
        if doc["type"] != "dropped":  # the worker's own report of what it left out
            counted += 1
            counted_bytes += len(line)
    scope = " (judged: the last 64 KiB of stderr)" if truncated else ""
    battery.report.add(
        "events.framing",
        "fail" if invalid else "pass",
        "; ".join(invalid[:3]) + (f"; and {len(invalid) - 3} more" if len(invalid) > 3 else "")
        or f"{len(lines)} event lines, each RS + one valid event + LF within 16384 bytes{scope}",
    )
    budget = probes.EVENTS_BUDGET
    # A token bucket of rate r and burst r lets r * (1 + seconds) events through.
    allowed = int(budget["max_per_second"] * (1 + answer.seconds)) + 1
    over = []
    if counted_bytes > budget["max_bytes"]:
        over.append(f"{counted_bytes} bytes of events, over max_bytes={budget['max_bytes']}")
    if counted > allowed:
        over.append(
            f"{counted} events in {answer.seconds:.2f}s, over"
            f" max_per_second={budget['max_per_second']}"
        )
    battery.report.add(
        "events.budget",
        "fail" if over else "pass",
        "; ".join(over)
        or f"{counted} events, {counted_bytes} bytes within {budget} in {answer.seconds:.2f}s",
    )
