"""What happened to one call, and how it is classified. Shared by every runner.

A runner only moves bytes and watches a process or container: it reports an `Exchange`
(exit status, the bytes it read with caps, and whether it had to intervene). Turning that
into a result envelope is the same for every runner, so it lives here once:
`call_outcome()` for tool calls, `describe_outcome()` for the describe exchange. It is the
same for every envelope too: the dialect (dialect.py) only decodes stdout and says which
exit statuses it defines.
"""

from __future__ import annotations

import re
import signal as signals
from dataclasses import dataclass, field
from typing import Any, Literal

from envelopes import codec
from envelopes.v1 import (
    RUNNER_CODE_RETRYABLE,
    DescribeResult,
    ErrorCode,
    RunnerErrorCode,
    ToolCallRequest,
    ToolCallResult,
)
from runner.isolation.dialect import V1_DIALECT, Dialect

#: How much of the worker's stderr an outcome keeps (the end, where errors are).
STDERR_TAIL_BYTES = 64 * 1024

#: Characters a terminal or an editor acts on instead of showing: C0 controls but tab, LF
#: and CR (ESC starts ANSI sequences), DEL, C1 controls, and the Unicode bidi controls.
_CONTROL_CHARACTERS = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)

#: Why a runner stepped in; None when the worker ran to its own end.
Intervention = Literal["start_failed", "timeout", "oom", "stdout_too_large", "stderr_too_large"]


@dataclass
class Exchange:
    """Process-level facts about one request/response exchange with a worker."""

    stdout: bytes = b""
    stdout_bytes: int = 0
    stdout_truncated: bool = False
    stderr_tail: bytes = b""
    stderr_bytes: int = 0
    stderr_truncated: bool = False
    exit_code: int | None = None
    signal: int | None = None
    duration_ms: float = 0.0
    intervention: Intervention | None = None
    detail: str = ""  # what the runner saw when it intervened, for the error message
    runner_info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CallOutcome:
    """The typed outcome of one call: always a result envelope, plus what happened."""

    result: ToolCallResult
    exit_code: int | None
    signal: int | None
    duration_ms: float
    stdout_bytes: int
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool
    stderr_tail: str
    runner_info: dict[str, Any]
    #: The result or the stderr tail carries control or bidi characters (see
    #: `has_control_characters`): they are delivered intact, but show them escaped.
    control_characters: bool = False

    @property
    def ok(self) -> bool:
        return self.result.status == "ok"

    @property
    def error_code(self) -> str | None:
        return self.result.error.code if self.result.error else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "result": self.result.to_wire(),
            "exit_code": self.exit_code,
            "signal": self.signal,
            "duration_ms": round(self.duration_ms, 3),
            "stdout_bytes": self.stdout_bytes,
            "stderr_bytes": self.stderr_bytes,
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "stderr_tail": self.stderr_tail,
            "control_characters": self.control_characters,
            "runner": self.runner_info,
        }


@dataclass(frozen=True)
class DescribeOutcome:
    """A worker's DescribeResult, or why there is none (`error_code`, `message`)."""

    describe: DescribeResult | None
    error_code: RunnerErrorCode | None
    message: str
    exchange: Exchange


class TailBuffer:
    """Counts every byte written and keeps only the last `keep` of them."""

    def __init__(self, keep: int = STDERR_TAIL_BYTES) -> None:
        self.keep = keep
        self.total = 0
        self._data = bytearray()

    def write(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self._data += chunk
        if len(self._data) > 2 * self.keep:
            del self._data[: len(self._data) - self.keep]

    def tail(self) -> bytes:
        return bytes(self._data[-self.keep :])


def has_control_characters(value: Any) -> bool:
    """Whether any string in `value` (a str, or lists and dicts of them, keys included)
    holds a character a terminal or editor would interpret: ANSI escapes, other controls,
    bidi overrides. Worker output is data; whoever shows it to a person escapes it
    (`json.dumps` with ensure_ascii=True does) when this says so."""
    if isinstance(value, str):
        return _CONTROL_CHARACTERS.search(value) is not None
    if isinstance(value, dict):
        return any(has_control_characters(k) or has_control_characters(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_control_characters(item) for item in value)
    return False


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _runner_error(
    request_id: str, version: str, code: RunnerErrorCode, message: str
) -> ToolCallResult:
    return ToolCallResult.fail(request_id, code, message, RUNNER_CODE_RETRYABLE[code], version)


def _intervention_error(ex: Exchange, limit_hint: str) -> tuple[RunnerErrorCode, str] | None:
    """The runner's own code when it had to step in, else None."""
    match ex.intervention:
        case "start_failed":
            return "WORKER_START_FAILED", ex.detail or "the worker could not be started"
        case "timeout":
            return "WORKER_TIMEOUT", ex.detail or "the worker did not finish before the deadline"
        case "oom":
            return "WORKER_OOM", ex.detail or "the worker ran out of memory"
        case "stdout_too_large":
            return "OUTPUT_TOO_LARGE", ex.detail or f"stdout exceeded {limit_hint}"
        case "stderr_too_large":
            return "OUTPUT_TOO_LARGE", ex.detail or "stderr exceeded the runner's cap"
    return None


def _crash_message(ex: Exchange, dialect: Dialect = V1_DIALECT) -> str | None:
    """Why the process end itself says the worker crashed, else None."""
    if ex.signal is not None:
        return f"the worker was killed by {_signal_name(ex.signal)}"
    if ex.exit_code not in dialect.exit_statuses:
        return f"the worker exited with status {ex.exit_code} ({dialect.exit_rule})"
    return None


def call_outcome(
    request: ToolCallRequest, ex: Exchange, dialect: Dialect = V1_DIALECT
) -> CallOutcome:
    """Classify an exchange for a ToolCallRequest; the first matching rule wins:
    the runner's intervention, a crash (signal, or an exit status the dialect does not
    define: v1 has 0 and 1), output that is not one valid result for this request in the
    dialect's envelope, then the exit-code rule (v1: 0 = ok, 1 = error).
    """
    limit = f"max_result_bytes={request.limits.max_result_bytes}"
    result: ToolCallResult
    intervention = _intervention_error(ex, limit)
    crash = _crash_message(ex, dialect)
    if intervention is not None:
        result = _runner_error(request.id, request.version, *intervention)
    elif crash is not None:
        result = _runner_error(request.id, request.version, "WORKER_CRASHED", crash)
    elif not ex.stdout.strip():
        result = _runner_error(
            request.id,
            request.version,
            "MALFORMED_OUTPUT",
            f"the worker exited with status {ex.exit_code} without writing a result",
        )
    else:
        try:
            result = dialect.decode(ex.stdout, request)
        except codec.MalformedOutput as exc:
            result = _runner_error(request.id, request.version, "MALFORMED_OUTPUT", str(exc))
        else:
            expected_exit = dialect.expected_exit(result)
            if ex.exit_code != expected_exit:
                result = _runner_error(
                    request.id,
                    request.version,
                    "MALFORMED_OUTPUT",
                    f"status {result.status!r} must come with exit status {expected_exit},"
                    f" got {ex.exit_code}",
                )
    stderr_tail = ex.stderr_tail.decode("utf-8", errors="replace")
    return CallOutcome(
        result=result,
        exit_code=ex.exit_code,
        signal=ex.signal,
        duration_ms=ex.duration_ms,
        stdout_bytes=ex.stdout_bytes,
        stderr_bytes=ex.stderr_bytes,
        stdout_truncated=ex.stdout_truncated,
        stderr_truncated=ex.stderr_truncated,
        stderr_tail=stderr_tail,
        runner_info=ex.runner_info,
        control_characters=has_control_characters([result.to_wire(), stderr_tail]),
    )


def refused_outcome(request: ToolCallRequest, code: ErrorCode, message: str) -> CallOutcome:
    """The outcome of a call the runner refused before starting any worker."""
    result = ToolCallResult.fail(request.id, code, message, False, request.version)
    return CallOutcome(result, None, None, 0.0, 0, 0, False, False, "", {"started": False})


def describe_outcome(ex: Exchange, max_bytes: int) -> DescribeOutcome:
    """Classify an exchange for a DescribeRequest (same rules, no id to echo)."""
    failure = _intervention_error(ex, f"{max_bytes} bytes")
    if failure is None and (crash := _crash_message(ex)) is not None:
        failure = ("WORKER_CRASHED", crash)
    if failure is None and ex.exit_code != 0:
        failure = ("MALFORMED_OUTPUT", f"describe must exit 0, got {ex.exit_code}")
    if failure is not None:
        return DescribeOutcome(None, failure[0], failure[1], ex)
    try:
        described = codec.decode_describe_result(ex.stdout, max_bytes)
    except codec.MalformedOutput as exc:
        return DescribeOutcome(None, "MALFORMED_OUTPUT", str(exc), ex)
    return DescribeOutcome(described, None, "", ex)
