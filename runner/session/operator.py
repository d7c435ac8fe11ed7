"""What an operator sees: the conditions a session is in and why, in words.

Conditions (what `session list --status` filters on): the stored status (running,
waiting, frozen, quarantined, failed, completed, cancelled), plus `stuck` (its lease
expired without being released: the holder died), `unknown_outcome` and `call_failed`
(some call of the session is in that state), and `expired` (some call expired, or a
deferred call's expiry has passed though no process has recorded it yet: expiry is a
matter of time, not of who next takes the lease; see transitions.overdue).
"""

from __future__ import annotations

import json
from typing import Any

from runner.session.secrets import redact
from runner.state import SessionTail, ToolResult
from runner.state.transitions import overdue
from runner.stores.base import Lease

CONDITIONS = ("running", "waiting", "stuck", "expired", "unknown_outcome", "quarantined",
              "failed", "call_failed", "frozen", "cancelled", "completed")  # fmt: skip


def conditions(session: SessionTail, lease: Lease | None, now_ms: int) -> list[str]:
    """The conditions of `session` (see the module). Call states are read from the calls
    it holds: a tail's leave out calls that ended before its last turn, so a list that
    filters on them gives it the whole Session."""
    found: list[str] = [session.status]
    if lease is not None and lease.owner and lease.expires_ms <= now_ms:
        found.append("stuck")
    states = {c.state for c in session.calls.values()}
    if "expired" in states or overdue(session, now_ms):
        found.append("expired")
    found += [name for state, name in (("unknown_outcome", "unknown_outcome"),
              ("failed", "call_failed")) if state in states]  # fmt: skip
    return found


def explain(session: SessionTail, lease: Lease | None, now_ms: int) -> str:
    """One paragraph: why the session is where it is, and what unsticks it."""
    lines: list[str] = []
    if lease is not None and lease.owner:
        if lease.expires_ms > now_ms:
            lines.append(f"leased by {lease.owner} (token {lease.fencing_token})")
        else:
            lines.append(f"stuck: {lease.owner} held it and stopped renewing; the next"
                         " resume or worker takes over")  # fmt: skip
    if session.status == "quarantined":
        lines.append(f"quarantined: {session.quarantine_reason}")
    if session.status == "failed":
        lines.append(f"failed: {session.failure_reason}; fix the cause, then `session resume"
                     f" {session.id} --retry` tries again with a fresh budget")  # fmt: skip
    elif session.llm_last_error and session.status == "running":
        lines.append(_model_retry(session, now_ms))
    expired_now = {c.id for c in overdue(session, now_ms)}
    for call in session.calls.values():
        if call.state == "unknown_outcome":
            lines.append(f"call {call.id} ({call.tool}) has an unknown outcome: settle it with"
                         f" `session complete/fail {call.token}` or `session retry"
                         f" {call.token} --force`")  # fmt: skip
        elif call.id in expired_now and call.expires_ms is not None:
            lines.append(f"call {call.id} ({call.tool}) expired {_ago(call.expires_ms, now_ms)}"
                         " without a result; the next resume or worker records it and the"
                         " session goes on")  # fmt: skip
        elif call.state == "deferred":
            left = (call.expires_ms or 0) - now_ms
            until = f", expires in {left / 1000:.0f}s" if call.expires_ms else ""
            lines.append(f"call {call.id} ({call.tool}) waits for `session complete"
                         f" {call.token}`{until}")  # fmt: skip
        elif call.state == "ready" and call.next_attempt_ms and call.next_attempt_ms > now_ms:
            lines.append(f"call {call.id} retries in {(call.next_attempt_ms - now_ms) / 1000:.1f}s"
                         f" (attempt {call.attempts + 1} of {call.max_attempts})")  # fmt: skip
    if session.status == "frozen":
        lines.append("frozen by an operator: `session resume` continues it")
    if session.status == "running" and not lines:
        lines.append("ready to be stepped: `session resume` or a worker advances it")
    if session.status == "completed":
        lines.append("completed: the final answer is recorded")
    return "\n".join(lines) or session.status


def _model_retry(session: SessionTail, now_ms: int) -> str:
    used = (f"the model call has used {session.llm_attempts} attempt(s), the last failed:"
            f" {session.llm_last_error}")  # fmt: skip
    due = session.llm_next_attempt_ms
    if due is not None and due > now_ms:
        return f"{used}; the next attempt is in {(due - now_ms) / 1000:.1f}s"
    return f"{used}; the next resume or worker tries again"


def _ago(when_ms: int, now_ms: int) -> str:
    seconds = max(0, now_ms - when_ms) / 1000
    return f"{seconds:.0f}s ago" if seconds >= 1 else "just now"


def session_document(
    session: SessionTail, lease: Lease | None, now_ms: int, late: list[tuple[str, ToolResult]]
) -> dict[str, Any]:
    """The session as JSON plus `why`, `late_results` and `conditions` (what `session
    show --json` prints and the server's GET /v1/sessions/{id} returns). A deferred call
    past its expiry shows as expired even before a lease holder records it."""
    document: dict[str, Any] = {
        # redact: a session stored before secrets were kept out of stored decisions
        **redact(json.loads(session.to_json())), "why": explain(session, lease, now_ms),
        "late_results": [{"call_id": c, "result": r.model_dump()} for c, r in late],
        "conditions": conditions(session, lease, now_ms),
    }  # fmt: skip
    for call in overdue(session, now_ms):
        document["calls"][call.id].update(state="expired", overdue=True)
    return document
