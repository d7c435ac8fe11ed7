"""How sessions and calls change state: one table each, used by the code and the docs.

Every change of `TrackedCall.state` and `Session.status` goes through `move_call` and
`set_status`, which refuse a move the tables do not list (a bug, never a user's input).
docs/architecture.md shows the same tables (`markdown()`; a test keeps them equal).

`settle` is what every step does before it commits: fold a partial user turn whose calls
have all ended into a user turn of results, then say whether the session can be stepped
(running) or needs something from outside (waiting). It never touches a session an
operator stopped (frozen, quarantined, cancelled) or one that is failed or completed.
"""

from __future__ import annotations

from typing import NamedTuple

from runner.state.models import (
    CALL_STATES,
    SESSION_STATUSES,
    UNKNOWN_OUTCOME,
    CallState,
    PartialUserTurn,
    SessionStatus,
    SessionTail,
    ToolResult,
    ToolResultEntry,
    TrackedCall,
    UserTurn,
)


class Move(NamedTuple):
    source: str
    target: str
    why: str


#: Calls: created as ready or deferred (or already failed, for an unknown tool).
CALL_MOVES: tuple[Move, ...] = (
    Move("ready", "running", "a step starts it (counted first if isolated or external)"),
    Move("running", "ready", "the step yielded before it finished, or its holder died"),
    Move("running", "completed", "it returned a result"),
    Move("running", "failed", "it returned an error, timed out or used up its retries"),
    Move("running", "unknown_outcome", "the ledger shows an external call started, not ended"),
    Move("running", "cancelled", "an operator cancelled the session"),
    Move("ready", "completed", "a detached isolated call got its result from outside"),
    Move("ready", "failed", "a detached isolated call was failed from outside"),
    Move("ready", "cancelled", "an operator cancelled the session"),
    Move("deferred", "completed", "`session complete TOKEN` gave its result"),
    Move("deferred", "failed", "`session fail TOKEN` gave its error"),
    Move("deferred", "expired", "no result arrived before its expiry"),
    Move("deferred", "cancelled", "an operator cancelled the session"),
    Move("deferred", "unknown_outcome", "its claim lapsed and its tool's effects are external"),
    Move("unknown_outcome", "completed", "an operator settled it with a result"),
    Move("unknown_outcome", "failed", "an operator settled it with an error"),
    Move("unknown_outcome", "ready", "an operator forced a new attempt (`retry --force`)"),
    Move("unknown_outcome", "deferred", "an operator had a deferred call handed out again"),
    Move("unknown_outcome", "cancelled", "an operator cancelled the session"),
)

#: Sessions: created running.
SESSION_MOVES: tuple[Move, ...] = (
    Move("running", "waiting", "its open calls need results from outside"),
    Move("waiting", "running", "results arrived (or a call expired): it can be stepped"),
    Move("running", "completed", "the LLM gave its final answer"),
    Move("running", "failed", "its model call failed for good: retries spent, or unusable"),
    Move("failed", "running", "`session resume --retry` (with a fresh retry budget)"),
    Move("running", "frozen", "an operator froze it (`session freeze`)"),
    Move("waiting", "frozen", "an operator froze it (`session freeze`)"),
    Move("quarantined", "frozen", "an operator froze it (`session freeze`)"),
    Move("frozen", "running", "`session resume` continued it"),
    Move("running", "quarantined", "holders kept dying while advancing it"),
    Move("waiting", "quarantined", "holders kept dying while advancing it"),
    Move("quarantined", "running", "`session resume --unquarantine`"),
    Move("running", "cancelled", "an operator cancelled it"),
    Move("waiting", "cancelled", "an operator cancelled it"),
    Move("frozen", "cancelled", "an operator cancelled it"),
    Move("quarantined", "cancelled", "an operator cancelled it"),
    Move("failed", "cancelled", "an operator cancelled it"),
)

_CALL = frozenset((m.source, m.target) for m in CALL_MOVES)
_SESSION = frozenset((m.source, m.target) for m in SESSION_MOVES)
assert {s for m in CALL_MOVES for s in m[:2]} <= set(CALL_STATES)
assert {s for m in SESSION_MOVES for s in m[:2]} <= set(SESSION_STATUSES)


class IllegalTransition(RuntimeError):
    """The engine tried a state change the tables do not allow: a bug, not bad input."""


def move_call(call: TrackedCall, state: CallState, now_ms: int) -> None:
    if call.state != state and (call.state, state) not in _CALL:
        raise IllegalTransition(f"call {call.id}: {call.state} -> {state} is not a move")
    call.state, call.updated_ms = state, now_ms


def set_status(session: SessionTail, status: SessionStatus) -> None:
    if session.status != status and (session.status, status) not in _SESSION:
        raise IllegalTransition(f"session {session.id}: {session.status} -> {status}")
    session.status = status


def finish(call: TrackedCall, result: ToolResult, now_ms: int) -> None:
    """Give an open call its result; an unknown outcome stays open for an operator."""
    state: CallState
    if result.error_code == UNKNOWN_OUTCOME:
        state = "unknown_outcome"
    elif result.status == "ok":
        state = "completed"
    elif result.status == "error":
        state = "failed"
    else:
        state = result.status
    move_call(call, state, now_ms)
    call.result = result


def overdue(session: SessionTail, now_ms: int) -> list[TrackedCall]:
    """Deferred calls whose expiry has passed: expired by time, whether or not a
    process has recorded it yet (what `show`, `list` and `pending` report)."""
    return [c for c in session.open_calls() if c.state == "deferred"
            and c.expires_ms is not None and c.expires_ms <= now_ms]  # fmt: skip


def expire_due(session: SessionTail, now_ms: int) -> bool:
    """Move deferred calls whose expiry has passed to `expired`; True if any moved."""
    moved = False
    for call in overdue(session, now_ms):
        if call.expires_ms is not None:
            waited = (call.expires_ms - call.created_ms) / 1000
            finish(call, ToolResult(status="expired", error_code="EXPIRED", content=(
                f"no result arrived within {waited:g}s; the deferred call ({call.defer_reason})"
                " expired and will not be answered")), now_ms)  # fmt: skip
            moved = True
    return moved


def runnable(session: SessionTail) -> list[TrackedCall]:
    """Open calls a step runs itself: ready (or left running by a process that died),
    and not waiting for something outside."""
    outside = {c.id for c in session.waiting_on()}
    return [c for c in session.open_calls()
            if c.state in ("ready", "running") and c.id not in outside]  # fmt: skip


def settle(session: SessionTail) -> None:
    """Fold the partial user turn once all its calls ended, then running or waiting."""
    last = session.last_turn
    if isinstance(last, PartialUserTurn):
        calls = [session.call(i) for i in last.call_ids]
        if all(c.terminal for c in calls):
            entries = [ToolResultEntry(tool_call_id=c.id, tool=c.tool, result=c.result)
                       for c in calls if c.result is not None]  # fmt: skip
            session.replace_last_turn(UserTurn(tool_results=entries))
    if session.status not in ("running", "waiting"):
        return
    waiting = (
        not isinstance(session.last_turn, UserTurn)
        and bool(session.waiting_on())
        and not runnable(session)
    )
    set_status(session, "waiting" if waiting else "running")


def markdown() -> str:
    """Both tables as docs/architecture.md shows them."""

    def table(title: str, moves: tuple[Move, ...]) -> list[str]:
        rows = [f"| `{m.source}` | `{m.target}` | {m.why} |" for m in moves]
        return [f"**{title}**", "", "| from | to | when |", "| --- | --- | --- |", *rows, ""]

    return "\n".join(table("Calls", CALL_MOVES) + table("Sessions", SESSION_MOVES))
