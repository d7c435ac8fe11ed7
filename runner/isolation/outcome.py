"""What happened to one call, and how it is classified. Shared by every runner.

A runner only moves bytes and watches a process or container: it reports an `Exchange`
(exit status, the bytes it read with caps, and whether it had to intervene). Turning that
into a result envelope is the same for every runner, so it lives here once:
`call_outcome()` for tool calls, `describe_outcome()` for the describe exchange. It is the
same for every envelope too: the dialect (dialect.py) only decodes stdout and says which
exit statuses it defines.

Envelope 1.1 adds what the runner checks on top of the strict decoding: a worker may not
send `error.output_tail` (the runner's own: the end of what the worker streamed, put on
WORKER_TIMEOUT, WORKER_OOM and WORKER_CRASHED), nor 1.1 fields in a 1.0 result, and
media `path`s obey the path rules, are unique, and stay within the request's `collect`
caps in number and decoded bytes.
"""

from __future__ import annotations

import signal as signals
from dataclasses import dataclass, field
from typing import Any, Literal

from envelopes import codec
from envelopes.controls import has_control_characters
from envelopes.files import fold, path_problem
from envelopes.rules import COLLECT_DEFAULT_MAX_BYTES, COLLECT_DEFAULT_MAX_FILES, VERSION
from envelopes.v1 import (
    RUNNER_CODE_RETRYABLE,
    DescribeResult,
    ErrorCode,
    ErrorInfo,
    RunnerErrorCode,
    ToolCallRequest,
    ToolCallResult,
    base64_decoded_size,
    binding_retryable,
    media_parts,
)
from runner.isolation.dialect import V1_DIALECT, Dialect
from runner.isolation.events import EventReader, WorkerEvent

#: How much of the worker's stderr an outcome keeps (the end, where errors are).
STDERR_TAIL_BYTES = 64 * 1024

#: The codes after which the runner adds what the worker streamed (`error.output_tail`).
_TAIL_CODES = frozenset({"WORKER_TIMEOUT", "WORKER_OOM", "WORKER_CRASHED"})

#: Why a runner stepped in; None when the worker ran to its own end.
Intervention = Literal[
    "start_failed", "expired", "timeout", "oom", "stdout_too_large", "stderr_too_large"
]

#: Why a call whose deadline had passed before it started fails, and why a retry of the
#: same request cannot help (`deadline_ms` is absolute: the same request fails again).
EXPIRED_MESSAGE = (
    "the request's deadline_ms (absolute, epoch milliseconds) had passed before the call"
    " started; the same request fails again: send it with a deadline in the future"
)


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


ErrorSource = Literal["worker", "runner"]


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
    #: The last events delivered (1.1 `events`; their text is escaped already), and how
    #: many event lines were dropped (over the budget) or invalid.
    events: tuple[WorkerEvent, ...] = ()
    events_dropped: int = 0
    events_invalid: int = 0
    #: Which side produced `result.error`: "worker" (its own answer, read and accepted)
    #: or "runner" (a runner code, or a refusal before any worker started, such as the
    #: runner's own INVALID_REQUEST); None for an ok result. Not on the wire: a worker
    #: cannot vouch for it, and the runner knows it.
    error_source: ErrorSource | None = "runner"

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
            "events": [event.to_json() for event in self.events],
            "events_dropped": self.events_dropped,
            "events_invalid": self.events_invalid,
            "error_source": self.error_source if self.result.error is not None else None,
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
    """Counts every byte written and keeps only the last `keep` of them. A writer that
    filters what it keeps (event lines out of stderr) says how many bytes it read."""

    def __init__(self, keep: int = STDERR_TAIL_BYTES) -> None:
        self.keep = keep
        self.total = 0  # bytes read
        self.offered = 0  # bytes offered for keeping
        self._data = bytearray()

    def write(self, chunk: bytes, read: int | None = None) -> None:
        self.total += len(chunk) if read is None else read
        self.offered += len(chunk)
        self._data += chunk
        if len(self._data) > 2 * self.keep:
            del self._data[: len(self._data) - self.keep]

    def tail(self) -> bytes:
        return bytes(self._data[-self.keep :])

    def truncated(self) -> bool:
        """Whether the tail lost some of what was offered to it."""
        return self.offered > min(len(self._data), self.keep)


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
        case "expired":
            return "WORKER_TIMEOUT", ex.detail or EXPIRED_MESSAGE
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
    request: ToolCallRequest,
    ex: Exchange,
    dialect: Dialect = V1_DIALECT,
    events: EventReader | None = None,
) -> CallOutcome:
    """Classify an exchange for a ToolCallRequest (the one sent); the first matching rule
    wins: the runner's intervention, a crash (signal, or an exit status the dialect does
    not define: v1 has 0 and 1), output that is not one valid result for this request in
    the dialect's envelope (1.1: see `result_problem`), then the exit-code rule (v1: 0 =
    ok, 1 = error). `events` is the call's EventReader when the request asked for events.
    """
    limit = f"max_result_bytes={request.limits.max_result_bytes}"
    result: ToolCallResult
    source: ErrorSource = "runner"  # until a worker's own result is accepted
    intervention = _intervention_error(ex, limit)
    crash = _crash_message(ex, dialect)
    if ex.intervention == "expired" and intervention is not None:  # not retryable: stale
        result = ToolCallResult.fail(request.id, intervention[0], intervention[1], False,
                                     request.version)  # fmt: skip
    elif intervention is not None:
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
            if (problem := result_problem(result, request)) is not None:
                raise codec.MalformedOutput(problem)
        except codec.MalformedOutput as exc:
            result = _runner_error(request.id, request.version, "MALFORMED_OUTPUT", str(exc))
        else:
            source = "worker"
            result = _with_binding_retryable(result)
            expected_exit = dialect.expected_exit(result)
            if ex.exit_code != expected_exit:
                source = "runner"
                result = _runner_error(
                    request.id,
                    request.version,
                    "MALFORMED_OUTPUT",
                    f"status {result.status!r} must come with exit status {expected_exit},"
                    f" got {ex.exit_code}",
                )
    if events is not None and result.error is not None and result.error.code in _TAIL_CODES:
        result = _with_output_tail(result, events.output_tail())
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
        events=tuple(events.events) if events is not None else (),
        events_dropped=events.dropped if events is not None else 0,
        events_invalid=events.invalid if events is not None else 0,
        error_source=source if result.error is not None else None,
    )


def _with_binding_retryable(result: ToolCallResult) -> ToolCallResult:
    """A worker's error with `retryable` as section 5's column binds it."""
    error = result.error
    if error is None or binding_retryable(error.code, error.retryable) == error.retryable:
        return result
    fixed = error.model_copy(update={"retryable": not error.retryable})
    return result.model_copy(update={"error": fixed})


def _with_output_tail(result: ToolCallResult, tail: str) -> ToolCallResult:
    """`result` (a runner's error) with what the worker streamed before it ended."""
    if not tail or result.error is None:
        return result
    error = ErrorInfo(code=result.error.code, message=result.error.message,
                      retryable=result.error.retryable, output_tail=tail)  # fmt: skip
    return ToolCallResult(id=result.id, version=result.version, status="error", error=error)


def result_problem(result: ToolCallResult, request: ToolCallRequest) -> str | None:
    """What the runner refuses in a decoded result beyond the schema, or None:
    `error.output_tail` (the runner's alone), a 1.1 field in a 1.0 result, media `path`s
    breaking the path rules, repeated (compared case-folded), or past the request's
    `collect` caps (64 files and 16 MiB without `collect`) in number or decoded bytes."""
    if result.error is not None and result.error.output_tail is not None:
        return "error.output_tail: only the runner may set it"
    if result.output is None:
        return None
    # The models refuse most of this already; the runner checks again with its own rules.
    with_path = [(where, part) for where, part in media_parts(result.output) if part.path]
    if with_path and result.version == VERSION:
        return f"{with_path[0][0]}.path: a 1.1 field, in a {VERSION} result"
    collect = request.collect
    max_files = collect.max_files if collect is not None else COLLECT_DEFAULT_MAX_FILES
    max_bytes = collect.max_bytes if collect is not None else COLLECT_DEFAULT_MAX_BYTES
    seen: dict[str, str] = {}
    total = 0
    for count, (where, part) in enumerate(with_path, start=1):
        path = part.path
        assert path is not None
        problem = path_problem(path)
        if problem is not None:
            return f"{where}.path: {problem}"
        first = seen.setdefault(fold(path), where)
        if first != where:
            return f"{where}.path: the same path as {first}.path (compared case-folded)"
        if count > max_files:
            return f"{where}.path: more than max_files={max_files} files"
        total += base64_decoded_size(part.base64_data)
        if total > max_bytes:
            return f"{where}.path: over max_bytes={max_bytes} bytes decoded in all"
    return None


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
    if described.version == VERSION and described.capabilities is not None:
        message = f"capabilities: a 1.1 field, in a {VERSION} DescribeResult"
        return DescribeOutcome(None, "MALFORMED_OUTPUT", message, ex)
    return DescribeOutcome(described, None, "", ex)
