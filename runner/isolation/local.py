"""LocalProcessRunner: one fresh process per call, for workers you trust.

The process gets its own process group and session, an environment built from an
allow-list, a fresh temporary working directory (removed afterwards) and rlimits. It is
NOT a sandbox: the worker runs as this user, sees this filesystem and this network.
Use DockerRunner for untrusted code.

Lifecycle of one call, top to bottom:
  start (no shell; rlimits set by prlimit before the exec) -> write the request and close
  stdin -> drain stdout/stderr with caps while waiting for exit or the deadline -> on
  exit, SIGKILL what is left of the group
  (daemons and grandchildren holding the pipes) -> on deadline, SIGTERM the group, grace,
  SIGKILL -> reap, close, remove the working directory.

Starting and reaping the process block (fork/exec, waitpid), so they run in a worker
thread. The runner holds nothing between calls: `aclose()` has nothing to release.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import anyio
import anyio.to_thread

from envelopes.agents_exe import local_process_policy
from runner.isolation.base import ExchangeRunner, seconds_until
from runner.isolation.dialect import ENVELOPES, Dialect, EnvelopeName, dialect_for
from runner.isolation.events import EventReader
from runner.isolation.negotiation import FileLimits
from runner.isolation.outcome import Exchange, Intervention, TailBuffer
from runner.isolation.sharing import CapabilityCache

logger = logging.getLogger(__name__)

MiB = 1024 * 1024
#: Variables passed through from the runner's environment when the caller names no others.
DEFAULT_ENV_ALLOW = ("PATH", "LANG", "TZ")
FALLBACK_PATH = "/usr/local/bin:/usr/bin:/bin"
_READ_CHUNK = 64 * 1024
#: util-linux's prlimit sets the rlimits on itself, then execs the worker. Unlike a
#: preexec_fn, it leaves subprocess free to use vfork instead of forking this (large)
#: process, which halves the cost of a start. Where it is missing, a preexec_fn does it.
_PRLIMIT = shutil.which("prlimit", path="/usr/bin:/bin")


@dataclass(frozen=True)
class ProcessLimits:
    """Limits of a local worker process. None means unlimited for that rlimit."""

    address_space_bytes: int | None = 4096 * MiB
    file_size_bytes: int | None = 64 * MiB
    open_files: int = 256
    max_stderr_bytes: int = 8 * MiB
    #: Between SIGTERM and SIGKILL when the deadline passes.
    term_grace_s: float = 1.0
    #: After the worker exits, how long its pipes may stay open before we stop reading.
    drain_grace_s: float = 0.25

    def __post_init__(self) -> None:
        for name in ("address_space_bytes", "file_size_bytes"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"ProcessLimits.{name} must be positive or None, got {value}")
        if self.open_files < 16:
            raise ValueError(f"ProcessLimits.open_files must be at least 16, got {self.open_files}")
        if self.max_stderr_bytes <= 0:
            raise ValueError("ProcessLimits.max_stderr_bytes must be positive")


@dataclass(frozen=True, init=False)
class LocalProcessRunner(ExchangeRunner):
    argv: Sequence[str]
    limits: ProcessLimits = field(default_factory=ProcessLimits)
    #: Names of variables copied from the runner's environment (in addition to the default).
    env_allow: Sequence[str] = ()
    #: Variables set explicitly for the worker.
    env: Mapping[str, str] = field(default_factory=dict)
    #: The envelope the worker speaks (see dialect.py).
    envelope: EnvelopeName = "v1"
    #: Caps on a call's input files (envelope 1.1).
    file_limits: FileLimits = field(default_factory=FileLimits)
    #: `capabilities=`: what the worker declares, given instead of asked (base.py).
    declared_capabilities: frozenset[str] | None = None
    #: Where describe's answers go, shared by the runners of one owner (sharing.py);
    #: None: this runner's own.
    capability_cache: CapabilityCache | None = field(default=None, compare=False, repr=False)

    # Written out because `capabilities=` must not become a field: it would hide the
    # `capabilities()` method every runner has.
    def __init__(
        self,
        argv: Sequence[str],
        limits: ProcessLimits | None = None,
        env_allow: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        envelope: EnvelopeName = "v1",
        *,
        file_limits: FileLimits | None = None,
        capabilities: frozenset[str] | None = None,
        capability_cache: CapabilityCache | None = None,
    ) -> None:
        values = {"argv": argv, "limits": limits or ProcessLimits(), "env_allow": env_allow,
                  "env": {} if env is None else env, "envelope": envelope,
                  "file_limits": file_limits or FileLimits(),
                  "declared_capabilities": capabilities,
                  "capability_cache": capability_cache}  # fmt: skip
        for name, value in values.items():
            object.__setattr__(self, name, value)
        self.__post_init__()

    def __post_init__(self) -> None:
        if not self.argv or not all(isinstance(a, str) and a for a in self.argv):
            raise ValueError("LocalProcessRunner needs a non-empty argv of non-empty strings")
        if self.envelope not in ENVELOPES:
            raise ValueError(
                f"LocalProcessRunner: unknown envelope {self.envelope!r};"
                f" expected one of {', '.join(ENVELOPES)}"
            )

    @property
    def dialect(self) -> Dialect:
        return dialect_for(self.envelope, local_process_policy(self.argv[0]))

    def command(self) -> list[str]:
        """argv with a relative program path made absolute: the worker starts in a fresh
        directory, where `./worker` or `.venv/bin/python` would not be found."""
        program, *rest = self.argv
        if "/" in program and not os.path.isabs(program):
            program = os.path.abspath(program)
        return [program, *rest]

    async def capability_key(self) -> Hashable | None:
        """The command, the envelope, the explicit environment and the identity (inode,
        size, mtime, ctime) of every argument naming a file: runners of one worker made per call
        (as sessions do) describe it once between them, and an edited script is asked
        again."""
        files = []
        for index, argument in enumerate(self.command()):
            if "/" in argument:
                path: str | None = argument
            else:  # the program is looked up on PATH; other bare words name no file
                path = shutil.which(argument) if index == 0 else None
            try:
                found = os.stat(path) if path else None
            except OSError:
                found = None
            if found is not None:
                # ctime too: a rewrite that keeps size and restores mtime still moves it.
                files.append(
                    (argument, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)
                )
        return ("local", tuple(self.command()), tuple(files), self.envelope,
                tuple(sorted(self.env.items())))  # fmt: skip

    def worker_environment(self, workdir: str) -> dict[str, str]:
        names = (*DEFAULT_ENV_ALLOW, *self.env_allow)
        env = {name: os.environ[name] for name in names if name in os.environ}
        env.setdefault("PATH", FALLBACK_PATH)
        env["HOME"] = env["TMPDIR"] = workdir
        env.update(self.env)
        return env

    def rlimits(self) -> dict[int, int]:
        """The worker's rlimits (soft = hard), by resource."""
        limits = self.limits
        chosen = {resource.RLIMIT_CORE: 0, resource.RLIMIT_NOFILE: limits.open_files}
        if limits.file_size_bytes is not None:
            chosen[resource.RLIMIT_FSIZE] = limits.file_size_bytes
        if limits.address_space_bytes is not None:
            chosen[resource.RLIMIT_AS] = limits.address_space_bytes
        return chosen

    def _apply_rlimits(self) -> None:  # runs in the child between fork and exec
        for which, value in self.rlimits().items():
            resource.setrlimit(which, (value, value))

    def _spawn_argv(self, env: Mapping[str, str]) -> list[str]:
        """The command under `prlimit`. The program is looked up first, so that a
        missing one is still refused by Popen's own error, before anything starts."""
        command = self.command()
        program = command[0]
        found = shutil.which(program, path=env.get("PATH")) if "/" not in program else program
        if found is None or not os.access(found, os.X_OK) or os.path.isdir(found):
            reason = errno.EACCES if found and os.path.exists(found) else errno.ENOENT
            raise OSError(reason, os.strerror(reason), program)
        flags = [f"--{_PRLIMIT_NAMES[which]}={value}:{value}"
                 for which, value in self.rlimits().items()]  # fmt: skip
        return [str(_PRLIMIT), *flags, "--", *command]

    async def exchange(
        self,
        payload: bytes,
        deadline_ms: int,
        stdout_cap: int,
        call_label: str,
        *,
        events: EventReader | None = None,
    ) -> Exchange:
        ex = Exchange(runner_info={"runner": "local", "argv": list(self.argv), "call": call_label,
                                   "runtime": "process"})  # fmt: skip
        started = time.monotonic()
        if seconds_until(deadline_ms) <= 0:
            ex.intervention = "expired"
            return ex
        workdir = tempfile.mkdtemp(prefix="agents-runner-")
        proc: subprocess.Popen[bytes] | None = None
        try:
            try:
                proc = await self._start(workdir)
            except OSError as exc:
                logger.warning("call %s: cannot start %r: %s", call_label, self.argv[0], exc)
                ex.intervention = "start_failed"
                ex.detail = f"cannot start {self.argv[0]!r}: {exc.strerror or exc}"
                return ex
            ex.runner_info["pid"] = proc.pid
            logger.debug("call %s: started worker pid %d", call_label, proc.pid)
            await _Supervisor(proc, self.limits, ex, events).run(payload, deadline_ms, stdout_cap)
        finally:
            if proc is not None:
                _kill_group(proc.pid, signal.SIGKILL)
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(_reap, proc)
                ex.exit_code, ex.signal = _exit_status(proc.returncode)
                logger.debug("call %s: worker pid %d ended (exit %s, signal %s%s)", call_label,
                             proc.pid, ex.exit_code, ex.signal,
                             f", {ex.intervention}" if ex.intervention else "")  # fmt: skip
            shutil.rmtree(workdir, ignore_errors=True)
            ex.duration_ms = (time.monotonic() - started) * 1000
        return ex

    async def _start(self, workdir: str) -> subprocess.Popen[bytes]:
        # Shielded: a process that was started always reaches the caller's `finally`.
        with anyio.CancelScope(shield=True):
            proc = await anyio.to_thread.run_sync(self._spawn, workdir)
        return proc

    def _spawn(self, workdir: str) -> subprocess.Popen[bytes]:
        """Start the worker (blocking: fork and exec)."""
        env = self.worker_environment(workdir)
        return subprocess.Popen(
            self.command() if _PRLIMIT is None else self._spawn_argv(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=env,
            start_new_session=True,
            preexec_fn=self._apply_rlimits if _PRLIMIT is None else None,
            close_fds=True,
        )


_PRLIMIT_NAMES = MappingProxyType({
    resource.RLIMIT_CORE: "core", resource.RLIMIT_NOFILE: "nofile",
    resource.RLIMIT_FSIZE: "fsize", resource.RLIMIT_AS: "as",
})  # fmt: skip


def _exit_status(returncode: int | None) -> tuple[int | None, int | None]:
    if returncode is None:
        return None, None
    return (returncode, None) if returncode >= 0 else (None, -returncode)


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(pgid, sig)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Wait for the (killed) worker and close our ends of its pipes (blocking)."""
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):  # closing a pipe the worker broke
                pipe.close()


class _Supervisor:
    """Feeds, drains and watches one started process until it ends or the deadline."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        limits: ProcessLimits,
        ex: Exchange,
        events: EventReader | None = None,
    ) -> None:
        self.proc = proc
        self.limits = limits
        self.ex = ex
        self.events = events
        self.stdout = bytearray()
        self.stderr = TailBuffer()
        self.readers_done = 0
        self.pipes_closed = anyio.Event()

    async def run(self, payload: bytes, deadline_ms: int, stdout_cap: int) -> None:
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            os.set_blocking(pipe.fileno(), False)
        try:
            with anyio.move_on_after(max(seconds_until(deadline_ms), 0)) as deadline:
                async with anyio.create_task_group() as io:
                    io.start_soon(self._feed, payload)
                    io.start_soon(self._read_stdout, stdout_cap)
                    io.start_soon(self._read_stderr)
                    await self._wait_exit()
                    # The worker is a zombie now: its group id cannot be reused yet, so
                    # killing the group reaches only what it left behind.
                    _kill_group(self.proc.pid, signal.SIGKILL)
                    with anyio.move_on_after(self.limits.drain_grace_s):
                        await self.pipes_closed.wait()
                    io.cancel_scope.cancel()
            if deadline.cancelled_caught and self.ex.intervention is None:
                self.ex.intervention = "timeout"
                self.ex.detail = "the deadline passed; the worker's process group got SIGTERM"
                await self._terminate()
        finally:
            self.ex.stdout = bytes(self.stdout)
            self.ex.stderr_tail = self.stderr.tail()
            self.ex.stderr_bytes = self.stderr.total
            self.ex.stderr_truncated |= self.stderr.truncated()

    async def _wait_exit(self) -> None:
        try:
            pidfd = os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):  # old kernel: wait in a thread instead
            await anyio.to_thread.run_sync(self.proc.wait, abandon_on_cancel=True)
            return
        try:
            await anyio.wait_readable(pidfd)
        finally:
            os.close(pidfd)

    async def _terminate(self) -> None:
        _kill_group(self.proc.pid, signal.SIGTERM)
        with anyio.move_on_after(self.limits.term_grace_s) as grace:
            await self._wait_exit()
        if grace.cancelled_caught:
            self.ex.detail += f", then SIGKILL after {self.limits.term_grace_s:g}s"
        _kill_group(self.proc.pid, signal.SIGKILL)

    def _stop(self, intervention: Intervention, detail: str) -> None:
        if self.ex.intervention is None:
            self.ex.intervention = intervention
            self.ex.detail = detail
        _kill_group(self.proc.pid, signal.SIGKILL)

    async def _feed(self, payload: bytes) -> None:
        assert self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        view = memoryview(payload)
        # A worker may close its stdin before reading it all: its answer still counts.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            while view:
                await anyio.wait_writable(fd)
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    continue
        self.proc.stdin.close()  # EOF: the request is complete

    async def _read(self, fd: int) -> bytes:
        while True:
            await anyio.wait_readable(fd)
            try:
                return os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                continue

    def _reader_finished(self) -> None:
        self.readers_done += 1
        if self.readers_done == 2:
            self.pipes_closed.set()

    async def _read_stdout(self, cap: int) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while chunk := await self._read(fd):
            self.ex.stdout_bytes += len(chunk)
            room = cap - len(self.stdout)
            self.stdout += chunk[:room]
            if len(chunk) > room:
                self.ex.stdout_truncated = True
                self._stop("stdout_too_large", f"stdout passed max_result_bytes={cap}")
                break
        self._reader_finished()

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        cap = self.limits.max_stderr_bytes
        while chunk := await self._read(fd):
            # With events, each complete event line is delivered by feed(), right here.
            kept = chunk if self.events is None else self.events.feed(chunk)
            self.stderr.write(kept, len(chunk))
            if self.stderr.total > cap:
                self.ex.stderr_truncated = True
                self._stop("stderr_too_large", f"stderr passed the runner's cap of {cap} bytes")
                break
        self._reader_finished()
