"""What the engine's operations return: plain reports, and their JSON for the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from runner.state import Session, SessionStatus, TrackedCall

StepAction = Literal["llm_turn", "ran_calls", "nothing"]


@dataclass(frozen=True)
class StepReport:
    """What one step (or a whole resume) did and where the session stands."""

    session: Session
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
        if session.status == "waiting":
            out["reason"] = waiting_reason(session)
            out["deferred_calls"] = [pending_entry(c) for c in session.waiting_on()]
        return out


def waiting_reason(session: Session) -> str:
    states = {("deferred" if c.state == "deferred" else "isolated") for c in session.waiting_on()}
    if states == {"deferred"}:
        return "waiting on deferred calls"
    if states == {"isolated"}:
        return "waiting on detached isolated calls (session run-isolated runs them)"
    return "waiting on deferred and detached isolated calls"


def pending_entry(call: TrackedCall) -> dict[str, Any]:
    """One call a session waits on, as `session pending` and a yield report list it."""
    entry: dict[str, Any] = {"tool": call.tool, "tool_call_id": call.id,
                             "continuation_token": call.token, "state": call.state}  # fmt: skip
    if call.defer_reason:
        entry["reason"] = call.defer_reason
    if call.label:
        entry["label"] = call.label
    return entry


@dataclass(frozen=True)
class WakeReport:
    """applied: recorded; already_completed: the same result was there already;
    conflicting: the call ended with a different result, this one was refused;
    late: the call had expired, the result is kept as late and changes nothing."""

    session: Session
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
