"""What a runner sends a worker: envelope 1.0, or 1.1 when both sides have a capability.

A runner learns a worker's capabilities from its DescribeResult (base.py asks at 1.1,
then 1.0, once per runner). A call is then planned here, before any worker starts:
- input files are checked (the path rules, duplicates after case folding, a file under
  another file's path, base64, `FileLimits`); a bad one refuses the call;
- `files` / `collect` go only to a worker declaring `files`: to another, the call is
  refused (INVALID_REQUEST);
- `events` go only to a worker declaring `events`; to another the request simply goes
  without them (events are best-effort).
A request the runner need not change is sent as it is, so a 1.0 worker sees exactly the
bytes it saw before 1.1 existed. One the runner changes carries version 1.1 when a 1.1
field remains in it, 1.0 otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envelopes import files as wire_files
from envelopes.rules import (
    CAPABILITY_EVENTS,
    CAPABILITY_FILES,
    EVENTS_MAX_BYTES_CEILING,
    FILES_MAX_BYTES,
    FILES_MAX_COUNT,
    LATEST_VERSION,
    VERSION,
)
from envelopes.v1 import DescribeResult, EventBudget, ToolCallRequest
from runner.isolation.events import EventCallback


@dataclass(frozen=True)
class FileLimits:
    """How many input files a runner sends a worker, and how many bytes (decoded) in
    all. The wire's caps are the ceilings: a runner may lower them, not raise them."""

    max_files: int = FILES_MAX_COUNT
    max_bytes: int = FILES_MAX_BYTES

    def __post_init__(self) -> None:
        if not 1 <= self.max_files <= FILES_MAX_COUNT:
            raise ValueError(f"FileLimits.max_files must be 1..{FILES_MAX_COUNT},"
                             f" got {self.max_files}")  # fmt: skip
        if not 1 <= self.max_bytes <= FILES_MAX_BYTES:
            raise ValueError(f"FileLimits.max_bytes must be 1..{FILES_MAX_BYTES},"
                             f" got {self.max_bytes}")  # fmt: skip


def capabilities_of(described: DescribeResult) -> frozenset[str]:
    """The capabilities a DescribeResult declares; none for a worker that does not speak
    1.1 (a 1.0 document, or 1.1 missing from `supported_versions`)."""
    if described.version != LATEST_VERSION or LATEST_VERSION not in described.supported_versions:
        return frozenset()
    return frozenset(described.capabilities or ())


def input_files_problem(request: ToolCallRequest, limits: FileLimits) -> str | None:
    """Why the request's input files may not be sent (`files[2].path: ...`), or None."""
    if not request.files:
        return None
    entries = [entry.model_dump(mode="json") for entry in request.files]
    checked = wire_files.check_files(entries, limits.max_files, limits.max_bytes)
    return checked if isinstance(checked, str) else None


def has_files(request: ToolCallRequest) -> bool:
    return bool(request.files) or request.collect is not None


def wants_events(request: ToolCallRequest, on_event: EventCallback | None) -> bool:
    """Whether the caller wants live output: it gave a callback, or the request names a
    budget itself."""
    return on_event is not None or request.events is not None


def needs_capabilities(request: ToolCallRequest, on_event: EventCallback | None) -> bool:
    """Whether planning this call depends on the worker's capabilities at all."""
    return has_files(request) or wants_events(request, on_event)


class Refused(Exception):
    """The call cannot be sent to this worker; the message says why."""


def plan(
    request: ToolCallRequest,
    capabilities: frozenset[str],
    on_event: EventCallback | None,
    events_max_bytes: int = EVENTS_MAX_BYTES_CEILING,
) -> ToolCallRequest:
    """The request to send a worker with `capabilities`; Refused when it needs one the
    worker lacks (`files`)."""
    if has_files(request) and CAPABILITY_FILES not in capabilities:
        raise Refused(
            "the request carries files or collect, but the worker does not declare the"
            " `files` capability"
        )
    changes: dict[str, Any] = {}
    events = wants_events(request, on_event) and CAPABILITY_EVENTS in capabilities
    if events and request.events is None:
        budget = EventBudget()
        changes["events"] = {**budget.to_wire(),
                             "max_bytes": min(budget.max_bytes, events_max_bytes)}  # fmt: skip
    elif events and request.events is not None and request.events.max_bytes > events_max_bytes:
        changes["events"] = {**request.events.to_wire(), "max_bytes": events_max_bytes}
    elif not events and request.events is not None:
        changes["events"] = None
    # Input files and collect change what the tool runs on: a worker that does not
    # implement them must refuse, not run without them (section 3.1).
    must = [name for name in ("files", "collect") if getattr(request, name) is not None]
    if not set(must) <= set(request.critical or ()):
        changes["critical"] = [*dict.fromkeys([*(request.critical or ()), *must])]
    if not changes and (request.version == LATEST_VERSION or not _has_v11_fields(request)):
        return request  # unchanged: the very bytes a 1.0 runner would send
    doc = request.to_wire()
    doc.update(changes)
    doc = {name: value for name, value in doc.items() if value is not None}
    doc["version"] = LATEST_VERSION if _has_v11_fields_in(doc) else VERSION
    return ToolCallRequest.model_validate(doc)


def _has_v11_fields(request: ToolCallRequest) -> bool:
    return has_files(request) or request.events is not None


def _has_v11_fields_in(doc: dict[str, Any]) -> bool:
    return any(doc.get(name) is not None for name in ("files", "collect", "events"))
