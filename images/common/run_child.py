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
  process that escaped the group with the pipes open cannot hang the call;
- with `streams` (an envelopes.events.LineStreams), every line the child writes is also
  handed over as it arrives, so that the worker streams it as a `log` event (1.1) while
  the child still runs: a call killed at its deadline has already shown what it printed.

`run_for_request()` applies that to an envelope request: deadline from `deadline_ms`, caps
from `limits.max_result_bytes`, and content that always fits in the result envelope; code
too long for a command line reaches the child as a file on descriptor CODE_FD.

A worker process starts for every call, so this module imports only what a bare
interpreter has already loaded (plus `select`): posix_spawn and poll instead of
subprocess and selectors, no dataclasses, no typing at run time; ctypes loads only for
the prctl of shield_from_child().
"""

from __future__ import annotations

import codecs
import os
import select
import time

try:  # the C half of `signal`, loaded at start: `signal` itself imports enum
    from _signal import SIGKILL, SIGPIPE, SIGXFSZ
except ImportError:  # pragma: no cover - not CPython
    from signal import SIGKILL, SIGPIPE, SIGXFSZ

TYPE_CHECKING = False  # typing costs a fresh process milliseconds; mypy reads it as typing's
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from envelopes.events import LineStreams
    from envelopes.v1 import ToolCallRequest

#: After the child exits, how long its pipes may still deliver data.
DRAIN_SECONDS = 0.2
#: The runner owns the deadline: at `deadline_ms` it kills the worker and reports
#: WORKER_TIMEOUT. The worker kills its child this long *after* the deadline, a backstop
#: for when it runs without a runner watching (by hand, or a runner that lost track).
DEADLINE_BACKSTOP_SECONDS = 1.0
#: The longest argument the kernel takes on a command line is 128 KiB (MAX_ARG_STRLEN);
#: code longer than this goes to the child as a file on fd CODE_FD instead (see run()).
MAX_ARGUMENT_BYTES = 96 * 1024
CODE_FD = 3
#: How often to look for the child's exit when the kernel gives no pidfd.
_POLL_SECONDS = 0.05
#: After a SIGKILL, how long to wait for the child to be gone before giving up on it.
_KILL_WAIT_SECONDS = 2.0
_PR_SET_DUMPABLE = 4
_READ_CHUNK = 1 << 20
_WRITE_CHUNK = 1 << 16
_READABLE = select.POLLIN | select.POLLHUP | select.POLLERR
_WRITABLE = select.POLLOUT | select.POLLHUP | select.POLLERR
#: UTF-8 bytes that JSON carries as they are, and the controls with a two-byte escape.
_PLAIN_BYTES = bytes(b for b in range(0x20, 0x100) if b not in b'"\\')
_SHORT_ESCAPES = b'"\\\b\f\n\r\t'


class _Capture:
    __slots__ = ("kept", "limit", "seen")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.seen = 0

    def add(self, data: bytes) -> None:
        self.seen += len(data)
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += data[:room]


class ChildOutcome:
    """What the child did. `exit_code` is 128+N when signal N ended it."""

    __slots__ = (
        "duration",
        "exit_code",
        "stderr",
        "stderr_bytes",
        "stdout",
        "stdout_bytes",
        "timed_out",
    )

    def __init__(
        self,
        *,
        exit_code: int,
        stdout: bytes,
        stderr: bytes,
        stdout_bytes: int,
        stderr_bytes: int,
        timed_out: bool,
        duration: float,
    ) -> None:
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        self.stdout_bytes = stdout_bytes
        self.stderr_bytes = stderr_bytes
        self.timed_out = timed_out
        self.duration = duration


def code_file(code: bytes) -> int:
    """A read-only descriptor on an unnamed file holding `code`, at offset 0 (a memfd, or
    an O_TMPFILE in $TMPDIR): nothing to clean up, no path another call could open."""
    try:
        fd = os.memfd_create("agents-runner-code", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        fd = os.open(os.environ.get("TMPDIR") or "/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)
    try:
        view = memoryview(code)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _mark_descriptors_private(keep: int) -> None:
    """Close-on-exec on every descriptor above 2: the child must inherit only the ones
    run() gives it (subprocess's close_fds, which posix_spawn does not do)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > keep:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                continue  # the listing's own descriptor, already closed


def run(
    argv: Sequence[str],
    *,
    stdin: bytes | None,
    deadline: float,
    max_stream_bytes: int,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    code: bytes | None = None,
    streams: LineStreams | None = None,
) -> ChildOutcome:
    """Run `argv` until it exits or `deadline` (a time.monotonic() value) passes.

    `code`, when given, is readable by the child on descriptor CODE_FD (a regular file,
    from offset 0). The child starts in a new session with the default disposition of
    SIGPIPE and SIGXFSZ (Python ignores them), like subprocess.Popen(start_new_session=True).
    """
    started = time.monotonic()
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    in_read = in_write = code_fd = -1
    actions: list[tuple[Any, ...]] = []
    try:
        if stdin:
            in_read, in_write = os.pipe()
            actions.append((os.POSIX_SPAWN_DUP2, in_read, 0))
        else:
            actions.append((os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0))
        actions += [(os.POSIX_SPAWN_DUP2, out_write, 1), (os.POSIX_SPAWN_DUP2, err_write, 2)]
        if code is not None:
            code_fd = code_file(code)
            actions.append((os.POSIX_SPAWN_DUP2, code_fd, CODE_FD))
        _mark_descriptors_private(2)
        if cwd is not None:
            previous = os.getcwd()
            os.chdir(cwd)
        try:
            pid = os.posix_spawnp(
                argv[0],
                list(argv),
                dict(env) if env is not None else os.environ,
                file_actions=actions,
                setsid=True,
                setsigdef=(SIGPIPE, SIGXFSZ),
            )
        finally:
            if cwd is not None:
                os.chdir(previous)
    finally:
        for fd in (out_write, err_write, in_read, code_fd):
            if fd >= 0:
                os.close(fd)
    stdout_capture = _Capture(max_stream_bytes)
    stderr_capture = _Capture(max_stream_bytes)
    captures = {out_read: stdout_capture, err_read: stderr_capture}
    stream_names = {out_read: "stdout", err_read: "stderr"}
    pending = memoryview(stdin or b"")
    sent = 0
    poller = select.poll()
    watched: set[int] = set()

    def watch(fd: int, events: int, nonblocking: bool = True) -> None:
        if nonblocking:
            os.set_blocking(fd, False)
        poller.register(fd, events)
        watched.add(fd)

    def close(fd: int) -> None:
        poller.unregister(fd)
        watched.discard(fd)
        os.close(fd)

    watch(out_read, _READABLE)
    watch(err_read, _READABLE)
    if in_write >= 0:
        watch(in_write, _WRITABLE)
    exit_fd = _pidfd(pid)
    if exit_fd is not None:
        watch(exit_fd, select.POLLIN, nonblocking=False)

    exited_at: float | None = None
    killed_at: float | None = None
    timed_out = False
    status: int | None = None
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
            readers = [fd for fd in captures if fd in watched]
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
            if streams is not None:
                held = streams.due()  # a partial line waiting to be sent
                if held is not None:
                    timeout = min(timeout, held)
            # Whole milliseconds, rounded up, at most a minute: the loop comes back anyway.
            for fd, _ in poller.poll(int(min(max(timeout, 0.0), 60.0) * 1000) + 1):
                if fd == exit_fd:
                    continue  # handled at the top of the loop
                if fd == in_write:
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
                    if streams is not None:
                        streams.feed(stream_names[fd], data)
                else:
                    close(fd)
            if streams is not None:
                streams.tick()
    finally:
        if streams is not None:
            streams.finish()
        if exited_at is None:
            _kill_group(pid)
        for fd in list(watched):
            close(fd)
        status = _reap(pid)
    code_ = os.waitstatus_to_exitcode(status) if status is not None else -SIGKILL
    return ChildOutcome(
        exit_code=128 - code_ if code_ < 0 else code_,
        stdout=bytes(stdout_capture.kept),
        stderr=bytes(stderr_capture.kept),
        stdout_bytes=stdout_capture.seen,
        stderr_bytes=stderr_capture.seen,
        timed_out=timed_out,
        duration=time.monotonic() - started,
    )


def _reap(pid: int) -> int | None:
    """The child's wait status, waiting at most _KILL_WAIT_SECONDS; None if it is stuck."""
    give_up = time.monotonic() + _KILL_WAIT_SECONDS
    delay = 0.0005
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return status
        if time.monotonic() >= give_up:
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


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
    try:  # noqa: SIM105  (contextlib is an import the worker's start does not pay for)
        os.killpg(pid, SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def shield_from_child() -> None:
    """Make this process non-dumpable. The child runs as the same user: without this it
    could read or write the worker's memory and descriptors through /proc/<pid>/mem and
    /proc/<pid>/fd (the request, the result being written). The child is dumpable again
    after its exec, as usual; only this process is shielded."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError, ImportError):
        return  # no prctl here (not Linux, or no libc to load): nothing to shield with


# --- envelope glue ---------------------------------------------------------------------


def run_for_request(
    argv: Sequence[str],
    stdin: str | None,
    request: ToolCallRequest,
    what: str,
    *,
    code: str | None = None,
    code_on_fd_argv: Sequence[str] = (),
) -> dict[str, Any]:
    """Run `argv` for `request` and return the tool's JSON content:
    {exit_code, stdout, stderr, stdout_bytes, stderr_bytes, truncated}.

    `code` (the script) goes last on the command line when it is at most
    MAX_ARGUMENT_BYTES long; for a longer one (the kernel refuses arguments over 128 KiB)
    the command is `code_on_fd_argv`, which must read it from descriptor CODE_FD.
    Raises ToolError DEADLINE_EXCEEDED when the deadline passes first; `what` names the
    program in messages ("bash", "python").
    """
    from envelopes.worker import ToolError

    budget = request.limits.max_result_bytes
    remaining = request.deadline_ms / 1000 - time.time()
    if remaining <= 0:
        raise ToolError("DEADLINE_EXCEEDED", f"the request's deadline passed before {what} ran")
    remaining += DEADLINE_BACKSTOP_SECONDS
    if any("\0" in arg for arg in argv) or (code is not None and "\0" in code):
        raise ToolError("INVALID_ARGUMENTS", f"the {what} code contains a NUL character")
    command, code_bytes = list(argv), None
    if code is not None:
        code_bytes = code.encode("utf-8")
        if len(code_bytes) <= MAX_ARGUMENT_BYTES:
            command.append(code)
            code_bytes = None
        else:
            command = list(code_on_fd_argv)
    shield_from_child()
    emit = getattr(request, "emit", None)  # envelopes.worker's RequestView has one (1.1)
    streams = None
    if emit is not None and emit.enabled:
        from envelopes.events import LineStreams

        streams = LineStreams(emit)
    outcome = run(
        command,
        stdin=stdin.encode("utf-8") if stdin else None,
        deadline=time.monotonic() + remaining,
        max_stream_bytes=budget,
        code=code_bytes,
        streams=streams,
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
    from envelopes import wire
    from envelopes.worker import ok_envelope

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
    room = request.limits.max_result_bytes - len(wire.dumps(ok_envelope(request, content)))
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


_UTF8_DECODER = codecs.getincrementaldecoder("utf-8")


def _decode(data: bytes, final: bool) -> str:
    """UTF-8 with invalid bytes replaced; a sequence cut by a cap is dropped, not replaced."""
    return _UTF8_DECODER("replace").decode(data, final=final)


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
