"""What an operator sees: the conditions a session is in and why, in words.

Conditions (what `session list --status` filters on): the stored status (running,
waiting, paused, quarantined, completed, cancelled), plus `stuck` (its lease expired
without being released: the holder died), `unknown_outcome`, `expired` and `failed`
(some call of the session is in that state).
"""

from __future__ import annotations

from runner.state import Session
from runner.stores.base import Lease

CONDITIONS = ("running", "waiting", "stuck", "expired", "unknown_outcome", "quarantined",
              "failed", "paused", "cancelled", "completed")  # fmt: skip


def conditions(session: Session, lease: Lease | None, now_ms: int) -> list[str]:
    found: list[str] = [session.status]
    if lease is not None and lease.owner and lease.expires_ms <= now_ms:
        found.append("stuck")
    states = {c.state for c in session.calls.values()}
    found += [s for s in ("unknown_outcome", "expired", "failed") if s in states]
    return found


def explain(session: Session, lease: Lease | None, now_ms: int) -> str:
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
    for call in session.calls.values():
        if call.state == "unknown_outcome":
            lines.append(f"call {call.id} ({call.tool}) has an unknown outcome: settle it with"
                         f" `session complete/fail {call.token}` or `session retry"
                         f" {call.token} --force`")  # fmt: skip
        elif call.state == "deferred":
            left = (call.expires_ms or 0) - now_ms
            until = f", expires in {left / 1000:.0f}s" if call.expires_ms else ""
            lines.append(f"call {call.id} ({call.tool}) waits for `session complete"
                         f" {call.token}`{until}")  # fmt: skip
        elif call.state == "ready" and call.next_attempt_ms and call.next_attempt_ms > now_ms:
            lines.append(f"call {call.id} retries in {(call.next_attempt_ms - now_ms) / 1000:.1f}s"
                         f" (attempt {call.attempts + 1} of {call.max_attempts})")  # fmt: skip
    if session.status == "paused":
        lines.append("paused by an operator: `session resume` continues it")
    if session.status == "running" and not lines:
        lines.append("ready to be stepped: `session resume` or a worker advances it")
    if session.status == "completed":
        lines.append("completed: the final answer is recorded")
    return "\n".join(lines) or session.status
