"""The audit trail: one record per isolated call, written after its outcome.

A record says what ran, where, under which limits and network policy, how it ended,
how long it took and what it tried to reach that was refused. It never holds what the
call was given or what it returned (either may hold secrets): only their sizes and
SHA-256 hashes. `arguments_sha256` hashes the call's arguments as canonical JSON (sorted
keys, compact, UTF-8: the tool cache's form), `output_sha256` the result's output in the
same form, so whoever holds a candidate value can check it against a record; `bytes_in`
is the size of the request envelope written to the worker, `bytes_out` what its stdout
sent back.

`AuditedRunner(inner, sink)` is a Runner that writes the record of each call through an
`AuditSink`: `JsonLinesAuditSink(path)` appends to a JSON-lines file, the stores have
theirs (runner.stores.audit). A record that cannot be written is never dropped quietly:
it is logged at ERROR with the record itself (no secrets in it), and with
`fail_closed=True` the call raises AuditFailed instead of returning an outcome nobody
recorded. Like every runner, nothing here knows of sessions: the ids come from the
request's context.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import heapq
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, ValidationError

from envelopes import codec
from envelopes.v1 import ToolCallRequest
from runner.isolation.base import Runner
from runner.isolation.docker import DockerRunner
from runner.isolation.events import EventCallback
from runner.isolation.local import LocalProcessRunner
from runner.isolation.outcome import CallOutcome, DescribeOutcome
from runner.isolation.pool import PooledRunner
from runner.lifecycle import AsyncClosing

logger = logging.getLogger(__name__)

#: The record format's version (`v`).
AUDIT_VERSION = 1


class AuditError(Exception):
    """An audit record could not be written or read; the message says what and where."""


class AuditFailed(AuditError):
    """A fail-closed audit could not record a call: its outcome is withheld."""


class AuditRecord(BaseModel):
    """One isolated call, as the audit trail keeps it (docs/threat-model.md, "Audit")."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: Literal[1] = 1
    #: When the call was handed to the runner: ISO-8601, UTC, milliseconds.
    at: str
    session_id: str | None = None
    call_id: str | None = None
    request_id: str
    tool: str
    runner: str
    image: str | None = None
    image_id: str | None = None
    runtime: str | None = None
    limits: dict[str, Any] | None = None
    network: dict[str, Any] | None = None
    #: "ok", or the result's error code.
    outcome: str
    duration_ms: float
    bytes_in: int
    bytes_out: int
    arguments_sha256: str
    output_sha256: str | None = None
    egress_denied: list[dict[str, Any]] = []
    egress_denied_count: int = 0

    @property
    def at_ms(self) -> int:
        return iso_to_ms(self.at)

    def to_json(self) -> str:
        """One line (ASCII: a control character in an image name cannot reach a terminal)."""
        return json.dumps(self.model_dump(mode="json"), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> AuditRecord:
        """The record in `text`; AuditError saying which field is wrong."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise AuditError(codec.describe_validation_error(exc)) from None


@dataclass(frozen=True)
class AuditQuery:
    """Which records a listing returns: those matching every filter given, at most
    `limit` of them (the newest; None: all), oldest first. Times are epoch ms."""

    session_id: str | None = None
    tool: str | None = None
    outcome: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    limit: int | None = 100

    def matches(self, record: AuditRecord) -> bool:
        at = record.at_ms
        return (
            (self.session_id is None or record.session_id == self.session_id)
            and (self.tool is None or record.tool == self.tool)
            and (self.outcome is None or record.outcome == self.outcome)
            and (self.since_ms is None or at >= self.since_ms)
            and (self.until_ms is None or at < self.until_ms)
        )


@runtime_checkable
class AuditSink(Protocol):
    """Where records go. `append` is synchronous and safe from any thread; it returns
    once the record is durable and raises (AuditError, OSError, a store's error) if not."""

    description: str

    def append(self, record: AuditRecord) -> None: ...


# --- making a record -------------------------------------------------------------------


def ms_to_iso(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_to_ms(text: str) -> int:
    """Epoch ms of an ISO-8601 time (one without a zone is taken as UTC); ValueError."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


def canonical_sha256(value: Any) -> str:
    """SHA-256 of `value` as canonical JSON (sorted keys, compact, UTF-8)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def runner_kind(runner: Runner) -> str:
    """What a record calls the runner when the outcome does not say (a refused call)."""
    if isinstance(runner, DockerRunner | PooledRunner):
        return "docker"
    if isinstance(runner, LocalProcessRunner):
        return "local"
    return type(runner).__name__


def request_size(runner: Runner, request: ToolCallRequest) -> int:
    """The size of what the runner writes to its worker for `request` (0: nothing can be)."""
    dialect = getattr(runner, "dialect", None)
    try:
        return len(dialect.encode(request) if dialect is not None else codec.encode(request))
    except ValueError:
        return 0


def audit_record(
    request: ToolCallRequest,
    outcome: CallOutcome | None,
    runner: Runner,
    started_ms: int,
    bytes_in: int,
    *,
    failure: str | None = None,
) -> AuditRecord:
    """The record of one call: its outcome, or (None) `failure`, the code of why the
    runner gave none (CANCELLED when the caller cancelled it)."""
    info: dict[str, Any] = outcome.runner_info if outcome is not None else {}
    kind = str(info.get("runner") or runner_kind(runner))
    image = info.get("image")
    if image is None and isinstance(runner, DockerRunner | PooledRunner):
        image = (runner if isinstance(runner, DockerRunner) else runner.docker).image
    local = kind == "local"
    result = outcome.result if outcome is not None else None
    output = result.output if result is not None else None
    denied = info.get("egress_denied") or []
    context = request.context
    return AuditRecord(
        at=ms_to_iso(started_ms),
        session_id=context.session_id if context is not None else None,
        call_id=context.call_id if context is not None else None,
        request_id=request.id,
        tool=request.tool.name,
        runner=kind,
        image=image,
        image_id=info.get("image_id"),
        # Local runs are processes on the host's network; other helpers fill these in.
        runtime=info.get("runtime", "process" if local else None),
        limits=info.get("limits"),
        network=info.get("network", {"mode": "host"} if local else None),
        outcome=(failure or "INTERNAL") if outcome is None else (outcome.error_code or "ok"),
        duration_ms=round(outcome.duration_ms if outcome is not None else 0.0, 3),
        bytes_in=bytes_in,
        bytes_out=outcome.stdout_bytes if outcome is not None else 0,
        arguments_sha256=canonical_sha256(request.arguments),
        output_sha256=canonical_sha256(output.to_wire()) if output is not None else None,
        egress_denied=list(denied),
        egress_denied_count=int(info.get("egress_denied_count", len(denied))),
    )


# --- the runner ------------------------------------------------------------------------


class AuditedRunner(AsyncClosing):
    """`inner`, with one record written to `sink` after each call (see the module).
    It owns `inner`: `aclose` closes it."""

    def __init__(self, inner: Runner, sink: AuditSink, *, fail_closed: bool = False) -> None:
        self.inner = inner
        self.sink = sink
        self.fail_closed = fail_closed

    async def call(
        self, request: ToolCallRequest, on_event: EventCallback | None = None
    ) -> CallOutcome:
        """The inner runner's outcome, once its record is written (`on_event` goes to
        the inner runner as it is: live events are not audited)."""
        started_ms = int(time.time() * 1000)
        bytes_in = request_size(self.inner, request)
        try:
            outcome = await self.inner.call(request, on_event)
        except BaseException as exc:  # the worker may have run: that is recorded too
            failure = "CANCELLED" if isinstance(exc, anyio.get_cancelled_exc_class()) else None
            record = audit_record(request, None, self.inner, started_ms, bytes_in,
                                  failure=failure)  # fmt: skip
            with anyio.CancelScope(shield=True):
                await self._write(record, raise_failure=False)
            raise
        await self._write(audit_record(request, outcome, self.inner, started_ms, bytes_in))
        return outcome

    async def _write(self, record: AuditRecord, *, raise_failure: bool = True) -> None:
        try:
            await anyio.to_thread.run_sync(self.sink.append, record)
        except Exception as exc:
            # Never lost silently: the record itself goes to the log (it holds no secrets).
            logger.error("AUDIT RECORD NOT WRITTEN to %s (%s: %s); the record: %s",
                         self.sink.description, type(exc).__name__, exc,
                         record.to_json())  # fmt: skip
            if self.fail_closed and raise_failure:
                raise AuditFailed(
                    f"call {record.request_id} ({record.tool}) ran but its audit record could"
                    f" not be written to {self.sink.description}: {exc}; fail-closed auditing"
                    " withholds its outcome"
                ) from exc

    async def describe(self, timeout_s: float = 30.0) -> DescribeOutcome:
        return await self.inner.describe(timeout_s)

    async def capabilities(self) -> frozenset[str]:
        return await self.inner.capabilities()

    async def aclose(self) -> None:
        await self.inner.aclose()


# --- the JSON-lines file ---------------------------------------------------------------


class JsonLinesAuditSink:
    """Records appended to a JSON-lines file: opened for each record with O_APPEND and
    O_NOFOLLOW (a symlink at `path` is refused, and a rotated file is simply created
    again), created 0600, written with one write under an exclusive flock and fsynced
    before `append` returns; any number of threads and processes may share the file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.description = f"audit file {self.path}"
        self._lock = threading.Lock()
        self._checked_dir = False
        if self.path.is_symlink():
            raise AuditError(f"{self.description} is a symbolic link; refusing to write through it")
        if self.path.exists() and not self.path.is_file():
            raise AuditError(f"{self.description} exists and is not a regular file")

    def append(self, record: AuditRecord) -> None:
        line = record.to_json().encode() + b"\n"
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            self._prepare_directory()
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise AuditError(f"{self.description} is a symbolic link; refusing to write"
                                 " through it") from None  # fmt: skip
            raise AuditError(f"cannot open {self.description}: {exc.strerror}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise AuditError(f"{self.description} is not a regular file")
            if info.st_mode & 0o077:
                logger.warning("%s is readable or writable by others (mode %o); chmod 600 it",
                               self.description, stat.S_IMODE(info.st_mode))  # fmt: skip
            fcntl.flock(fd, fcntl.LOCK_EX)  # one whole line at a time, across processes
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            raise AuditError(f"cannot append to {self.description}: {exc.strerror}") from None
        finally:
            os.close(fd)  # also releases the flock

    def _prepare_directory(self) -> None:
        """Once: make the file's directory (0700) so that the first record can land."""
        with self._lock:
            if not self._checked_dir:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._checked_dir = True


def read_audit_file(path: str | Path) -> Iterator[AuditRecord]:
    """The records of a JSON-lines audit file, in file order; AuditError naming the
    file and line of the first one that is not a record (blank lines are skipped)."""
    where = Path(path)
    try:
        handle = where.open("rb")
    except OSError as exc:
        raise AuditError(f"cannot read the audit file {where}: {exc.strerror}") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                record = AuditRecord.from_json(raw)
                record.at_ms  # noqa: B018  (a bad time is refused here, not while filtering)
            except AuditError as exc:
                raise AuditError(f"{where}:{number}: not an audit record: {exc}") from None
            except ValueError as exc:
                raise AuditError(f"{where}:{number}: bad time: {exc}") from None
            yield record


def select(records: Iterable[AuditRecord], query: AuditQuery) -> list[AuditRecord]:
    """The records `query` asks for, oldest first: the newest `query.limit` of them
    (kept in a heap of that size, so a long file is read in constant memory)."""
    matching = ((r.at_ms, n, r) for n, r in enumerate(records) if query.matches(r))
    if query.limit is None:
        return [r for _, _, r in sorted(matching)]
    return [r for _, _, r in sorted(heapq.nlargest(query.limit, matching))]


__all__ = [
    "AUDIT_VERSION",
    "AuditError",
    "AuditFailed",
    "AuditQuery",
    "AuditRecord",
    "AuditSink",
    "AuditedRunner",
    "JsonLinesAuditSink",
    "audit_record",
    "canonical_sha256",
    "read_audit_file",
    "select",
]
