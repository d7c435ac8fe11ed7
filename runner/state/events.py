"""The events one write makes: what changed between the stored session and the one being
written, as the store's event log records it (docs/events.md; the server streams it).

Kinds:
- `session.created`: the session was stored for the first time.
- `session.<status>` (running, waiting, frozen, quarantined, failed, completed,
  cancelled): its status changed to that one.
- `call.deferred`: a call newly in state deferred (it waits for a result from outside).
- `call.completed`: a call ended with a result.
- `call.failed`: a call ended without one; `data.state` says how (failed, expired or
  cancelled).
- `call.unknown_outcome`: a call's outcome is unknown; an operator decides.

Every event's data has `session_id`. Session events add `status`, `previous_status`
(None for `session.created`) and `agent_slug`, plus `final_answer` (completed) or
`reason` (failed, quarantined). Call events add `call_id`, `tool`, `state`,
`previous_state` (None for a call new in this write) and `turn`; `call.deferred` and
`call.unknown_outcome` add `continuation_token` (and the deferral's `reason` and
`expires_ms`); `call.completed` and `call.failed` add `result` (the ToolResult as JSON).

A call moving between ready and running makes no event. Progress events (a running
call's progress streamed by the runner) will be derived elsewhere: they are not a change
of stored state.

Pure: no I/O. Both durable stores call `derive_events` inside the transaction that
writes the session, with what that transaction read before writing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from runner.state.models import SESSION_STATUSES, SessionTail, TrackedCall

SESSION_CREATED = "session.created"
#: Every kind an event can have, in the order docs/events.md lists them.
EVENT_KINDS: tuple[str, ...] = (
    SESSION_CREATED,
    *(f"session.{status}" for status in SESSION_STATUSES),
    "call.deferred",
    "call.completed",
    "call.failed",
    "call.unknown_outcome",
)
#: The kind of event a call's new state makes (states missing here make none).
CALL_KINDS: Mapping[str, str] = MappingProxyType(
    {"deferred": "call.deferred", "completed": "call.completed", "failed": "call.failed",
     "expired": "call.failed", "cancelled": "call.failed",
     "unknown_outcome": "call.unknown_outcome"}
)  # fmt: skip


@dataclass(frozen=True)
class NewEvent:
    """An event not yet stored: the store gives it its `seq` and time."""

    kind: str
    call_id: str | None
    data: dict[str, Any]


def derive_events(
    session: SessionTail,
    written: Iterable[TrackedCall],
    stored_status: str | None,
    stored_states: Mapping[str, str],
) -> list[NewEvent]:
    """The events of writing `session`: `written` are the calls the write stores,
    `stored_status` the status stored before it (None: the session is new), and
    `stored_states` the stored state of each written call (absent: the call is new).

    Order: `session.created`, then the calls' events in the session's call order, then
    the status change, so a `session.waiting` comes after the calls it waits for."""
    events: list[NewEvent] = []
    if stored_status is None:
        events.append(_session_event(SESSION_CREATED, session, None))
    for call in written:
        before = stored_states.get(call.id)
        kind = CALL_KINDS.get(call.state)
        if kind is not None and call.state != before:
            events.append(NewEvent(kind, call.id, _call_data(session.id, call, before)))
    if stored_status is not None and session.status != stored_status:
        events.append(_session_event(f"session.{session.status}", session, stored_status))
    return events


def _session_event(kind: str, session: SessionTail, before: str | None) -> NewEvent:
    data: dict[str, Any] = {
        "session_id": session.id,
        "status": session.status,
        "previous_status": before,
        "agent_slug": session.agent_slug,
    }
    if session.status == "completed":
        data["final_answer"] = session.final_answer
    elif session.status == "failed":
        data["reason"] = session.failure_reason
    elif session.status == "quarantined":
        data["reason"] = session.quarantine_reason
    return NewEvent(kind, None, data)


def _call_data(session_id: str, call: TrackedCall, before: str | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "session_id": session_id,
        "call_id": call.id,
        "tool": call.tool,
        "state": call.state,
        "previous_state": before,
        "turn": call.turn,
    }
    if call.state in ("deferred", "unknown_outcome"):
        data["continuation_token"] = call.token
    if call.state == "deferred":
        data["reason"], data["expires_ms"] = call.defer_reason, call.expires_ms
    if call.terminal:
        data["result"] = call.result.model_dump(mode="json") if call.result else None
    return data
