"""Run one child process for a worker's tool, and turn it into the tool's JSON content.

Shared by the bash-runner and python-runner workers (each image copies this file into
/opt/agents-runner/lib). `run()` is the process part, standard library only:

- the child gets its own process group (a new session) and its own pipes; stdin is fed
  without blocking (or is /dev/null), stdout and stderr are drained at the same time;
- each stream keeps at most `max_stream_bytes`; the rest is read, counted and dropped, so a
  flood neither blocks the child nor fills memory;
- at `deadline` the whole group is SIGKILLed;
- when the child exits, whatever it left in its group (`sleep 1000 &`, a grandchild holding
  a pipe) is SIGKILLed, and the pipes get a short drain before they are abandoned, so a
  process that escaped the group with the pipes open cannot hang the call.

`run_for_request()` applies that to an envelope request: deadline from `deadline_ms`, caps
from `limits.max_result_bytes`, and content that always fits in the result envelope.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envelopes.v1 import ToolCallRequest

#: After the child exits, how long its pipes may still deliver data.
DRAIN_SECONDS = 0.2
#: The runner owns the deadline: at `deadline_ms` it kills the worker and reports
#: WORKER_TIMEOUT. The worker kills its child this long *after* the deadline, a backstop
#: for when it runs without a runner watching (by hand, or a runner that lost track).
DEADLINE_BACKSTOP_SECONDS = 1.0
#: How often to look for the child's exit when the kernel gives no pidfd.
_POLL_SECONDS = 0.05
#: After a SIGKILL, how long to wait for the child to be gone before giving up on it.
_KILL_WAIT_SECONDS = 2.0
_PR_SET_DUMPABLE = 4
_READ_CHUNK = 1 << 20
_WRITE_CHUNK = 1 << 16
#: UTF-8 bytes that JSON carries as they are, and the controls with a two-byte escape.
_PLAIN_BYTES = bytes(b for b in range(0x20, 0x100) if b not in b'"\\')
_SHORT_ESCAPES = b'"\\\b\f\n\r\t'


@dataclass
class _Capture:
    limit: int
    kept: bytearray
    seen: int = 0

    def add(self, data: bytes) -> None:
        self.seen += len(data)
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += data[:room]


@dataclass(frozen=True)
class ChildOutcome:
    """What the child did. `exit_code` is 128+N when signal N ended it."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    stdout_bytes: int
    stderr_bytes: int
    timed_out: bool
    duration: float


def run(
    argv: Sequence[str],
    *,
    stdin: bytes | None,
    deadline: float,
    max_stream_bytes: int,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> ChildOutcome:
    """Run `argv` until it exits or `deadline` (a time.monotonic() value) passes."""
    started = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=dict(env) if env is not None else None,
        cwd=cwd,
    )
    assert proc.stdout is not None and proc.stderr is not None
    pid = proc.pid
    stdout_capture = _Capture(max_stream_bytes, bytearray())
    stderr_capture = _Capture(max_stream_bytes, bytearray())
    captures = {proc.stdout.fileno(): stdout_capture, proc.stderr.fileno(): stderr_capture}
    pending = memoryview(stdin or b"")
    sent = 0
    selector = selectors.DefaultSelector()
    # Every fd in the selector, with the file object that owns it (None: a raw fd).
    files: dict[int, IO[bytes] | None] = {}

    def watch(file: IO[bytes] | None, fd: int, events: int) -> None:
        if file is not None:
            os.set_blocking(fd, False)
        selector.register(fd, events)
        files[fd] = file

    def close(fd: int) -> None:
        selector.unregister(fd)
        file = files.pop(fd)
        if file is None:
            os.close(fd)
        else:
            file.close()

    watch(proc.stdout, proc.stdout.fileno(), selectors.EVENT_READ)
    watch(proc.stderr, proc.stderr.fileno(), selectors.EVENT_READ)
    in_fd = -1
    if proc.stdin is not None:
        in_fd = proc.stdin.fileno()
        watch(proc.stdin, in_fd, selectors.EVENT_WRITE)
    exit_fd = _pidfd(pid)
    if exit_fd is not None:
        watch(None, exit_fd, selectors.EVENT_READ)

    exited_at: float | None = None
    killed_at: float | None = None
    timed_out = False
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and _has_exited(pid):
                # Still a zombie, so its pid cannot be reused yet: the group kill is safe.
                _kill_group(pid)
                exited_at = now
                if exit_fd is not None:
                    close(exit_fd)
                    exit_fd = None
            if exited_at is None and killed_at is None and now >= deadline:
                _kill_group(pid)
                timed_out = True
                killed_at = now
            readers = [fd for fd in captures if fd in files]
            if exited_at is not None and (not readers or now >= exited_at + DRAIN_SECONDS):
                break
            if (
                killed_at is not None
                and exited_at is None
                and now >= killed_at + _KILL_WAIT_SECONDS
            ):
                break  # unkillable (a D-state process); answer anyway
            if exited_at is not None:
                timeout = exited_at + DRAIN_SECONDS - now
            elif killed_at is not None or exit_fd is None:
                timeout = _POLL_SECONDS
            else:
                timeout = max(0.0, deadline - now)
            for key, _ in selector.select(timeout):
                fd = key.fd
                if fd == exit_fd:
                    continue  # handled at the top of the loop
                if fd == in_fd:
                    try:
                        sent += os.write(fd, pending[sent : sent + _WRITE_CHUNK])
                    except (BrokenPipeError, ConnectionResetError):
                        sent = len(pending)  # the child stopped reading: fine
                    except BlockingIOError:
                        continue
                    if sent >= len(pending):
                        close(fd)
                    continue
                try:
                    data = os.read(fd, _READ_CHUNK)
                except BlockingIOError:
                    continue
                if data:
                    captures[fd].add(data)
                else:
                    close(fd)
    finally:
        if exited_at is None:
            _kill_group(pid)
        for fd in list(files):
            # OSError: e.g. flushing stdin into a pipe nobody reads any more.
            with contextlib.suppress(OSError):
                close(fd)
        selector.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=_KILL_WAIT_SECONDS)
    code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    return ChildOutcome(
        exit_code=128 - code if code < 0 else code,
        stdout=bytes(stdout_capture.kept),
        stderr=bytes(stderr_capture.kept),
        stdout_bytes=stdout_capture.seen,
        stderr_bytes=stderr_capture.seen,
        timed_out=timed_out,
        duration=time.monotonic() - started,
    )


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # old kernel, or a seccomp profile without pidfd_open
        return None


def _has_exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (WNOWAIT)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def shield_from_child() -> None:
    """Make this process non-dumpable. The child runs as the same user: without this it
    could read or write the worker's memory and descriptors through /proc/<pid>/mem and
    /proc/<pid>/fd (the request, the result being written). The child is dumpable again
    after its exec, as usual; only this process is shielded."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


# --- envelope glue ---------------------------------------------------------------------


def run_for_request(
    argv: Sequence[str], stdin: str | None, request: ToolCallRequest, what: str
) -> dict[str, Any]:
    """Run `argv` for `request` and return the tool's JSON content:
    {exit_code, stdout, stderr, stdout_bytes, stderr_bytes, truncated}.

    Raises ToolError DEADLINE_EXCEEDED when the deadline passes first; `what` names the
    program in messages ("bash", "python").
    """
    from envelopes.worker import ToolError

    budget = request.limits.max_result_bytes
    remaining = request.deadline_ms / 1000 - time.time()
    if remaining <= 0:
        raise ToolError("DEADLINE_EXCEEDED", f"the request's deadline passed before {what} ran")
    remaining += DEADLINE_BACKSTOP_SECONDS
    if any("\0" in arg for arg in argv):
        raise ToolError("INVALID_ARGUMENTS", f"the {what} code contains a NUL character")
    shield_from_child()
    outcome = run(
        argv,
        stdin=stdin.encode("utf-8") if stdin else None,
        deadline=time.monotonic() + remaining,
        max_stream_bytes=budget,
    )
    if outcome.timed_out:
        tail = _decode(outcome.stderr, final=True)[-min(500, budget // 8) :]
        raise ToolError(
            "DEADLINE_EXCEEDED",
            f"{what} was killed after the request's deadline, after {outcome.duration:.1f} s "
            f"(stdout {outcome.stdout_bytes} bytes, stderr {outcome.stderr_bytes} bytes)"
            + (f"; end of stderr: {tail}" if tail else ""),
        )
    return fit_content(outcome, request)


def fit_content(outcome: ChildOutcome, request: ToolCallRequest) -> dict[str, Any]:
    """The JSON content for `outcome`, with stdout and stderr cut (keeping their start)
    so that the whole result envelope stays within `limits.max_result_bytes`."""
    from envelopes import codec
    from envelopes.v1 import JsonOutput, ToolCallResult

    full_stdout = _decode(outcome.stdout, final=len(outcome.stdout) == outcome.stdout_bytes)
    full_stderr = _decode(outcome.stderr, final=len(outcome.stderr) == outcome.stderr_bytes)
    stdout, stderr = full_stdout, full_stderr
    content: dict[str, Any] = {
        "exit_code": outcome.exit_code,
        "stdout": "",
        "stderr": "",
        "stdout_bytes": outcome.stdout_bytes,
        "stderr_bytes": outcome.stderr_bytes,
        "truncated": False,  # "false" is the longer spelling: the estimate stays safe
    }
    empty = ToolCallResult.ok(request.id, JsonOutput(content=content), request.version)
    room = request.limits.max_result_bytes - len(codec.encode(empty))
    out_size, err_size = _encoded_size(stdout), _encoded_size(stderr)
    if out_size + err_size > room:
        half = max(0, room) // 2
        if err_size <= half:
            stdout = _cut(stdout, room - err_size)
        elif out_size <= half:
            stderr = _cut(stderr, room - out_size)
        else:
            stdout, stderr = _cut(stdout, half), _cut(stderr, room - half)
    content["truncated"] = (
        len(outcome.stdout) < outcome.stdout_bytes
        or len(outcome.stderr) < outcome.stderr_bytes
        or len(stdout) < len(full_stdout)
        or len(stderr) < len(full_stderr)
    )
    content["stdout"], content["stderr"] = stdout, stderr
    return content


def _decode(data: bytes, final: bool) -> str:
    """UTF-8 with invalid bytes replaced; a sequence cut by a cap is dropped, not replaced."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=final)


def _encoded_size(text: str) -> int:
    """Bytes `text` adds inside a JSON string on the wire, as json.dumps writes it with
    ensure_ascii=False (quote, backslash, BS, FF, LF, CR and TAB take two bytes, the other
    control characters six), counted without building the escaped copy."""
    raw = text.encode("utf-8")
    special = raw.translate(None, _PLAIN_BYTES)
    short = len(special) - len(special.translate(None, _SHORT_ESCAPES))
    return len(raw) + 5 * len(special) - 4 * short


def _cut(text: str, limit: int) -> str:
    """The longest prefix of `text` whose encoded size is at most `limit`.

    A bisection where each step only measures the stretch past the longest prefix known to
    fit, so the whole search reads about twice the text, however long it is."""
    low, low_size = 0, 0
    high = min(len(text), max(limit, 0)) + 1  # every character costs at least one byte
    while high - low > 1:
        mid = (low + high) // 2
        size = low_size + _encoded_size(text[low:mid])
        if size <= limit:
            low, low_size = mid, size
        else:
            high = mid
    return text[:low]
