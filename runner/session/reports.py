"""What the engine's operations return: plain reports, and their JSON for the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from runner.session.secrets import redact
from runner.state import SessionStatus, SessionTail, TrackedCall

#: llm_retry: the model call failed and will be tried again (`llm_next_attempt_ms`);
#: llm_failed: it failed for good and the session is `failed`.
StepAction = Literal["llm_turn", "ran_calls", "nothing", "llm_retry", "llm_failed"]


@dataclass(frozen=True)
class StepReport:
    """What one step (or a whole resume) did and where the session stands."""

    session: SessionTail
    action: StepAction
    ran: tuple[str, ...] = ()  # ids of the calls run

    @property
    def status(self) -> SessionStatus:
        return self.session.status

    def to_dict(self) -> dict[str, Any]:
        session = self.session
        out: dict[str, Any] = {"status": session.status, "session_id": session.id,
                               "action": self.action, "ran": list(self.ran)}  # fmt: skip
        if session.status == "completed":
            out["final_answer"] = session.final_answer
        if session.status == "failed":
            out["reason"] = session.failure_reason
        if session.llm_attempts:
            out["llm_attempts"] = session.llm_attempts
            out["llm_next_attempt_ms"] = session.llm_next_attempt_ms
        if session.status == "waiting":
            out["reason"] = waiting_reason(session)
            out["deferred_calls"] = [pending_entry(c) for c in session.waiting_on()]
        return out


def waiting_reason(session: SessionTail) -> str:
    states = {("deferred" if c.state == "deferred" else "isolated") for c in session.waiting_on()}
    if states == {"deferred"}:
        return "waiting on deferred calls"
    if states == {"isolated"}:
        return "waiting on detached isolated calls (session run-isolated runs them)"
    return "waiting on deferred and detached isolated calls"


def pending_entry(call: TrackedCall, *, overdue: bool = False) -> dict[str, Any]:
    """One call a session waits on, as `session pending` and a yield report list it, with
    agents-exe's field names (tool, tool_call_id, continuation_token, disposition, call).
    `overdue`: its expiry has passed though no process has recorded it yet; it is
    reported as expired (the next process to hold the session expires it)."""
    entry: dict[str, Any] = {
        "tool": call.tool, "tool_call_id": call.id, "continuation_token": call.token,
        "state": "expired" if overdue else call.state, "disposition": redact(call.disposition),
        "call": {"id": call.id, "name": call.tool, "arguments": call.arguments},
    }  # fmt: skip
    if overdue:
        entry["expired"] = True
    if call.expires_ms is not None:
        entry["expires_ms"] = call.expires_ms
    if call.defer_reason:
        entry["reason"] = call.defer_reason
    if call.label:
        entry["label"] = call.label
    return entry


@dataclass(frozen=True)
class CompletionReport:
    """applied: recorded; already_completed: the same result was there already;
    conflicting: the call ended with a different result, this one was refused;
    late: the call had expired, the result is kept as late and changes nothing."""

    session: SessionTail
    applied: tuple[str, ...]
    already_completed: tuple[str, ...]
    conflicting: tuple[str, ...] = ()
    late: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session.id, "status": self.session.status,
                "applied": list(self.applied),
                "already_completed": list(self.already_completed),
                "conflicting": list(self.conflicting), "late": list(self.late),
                "open_calls": len(self.session.open_calls())}  # fmt: skip
