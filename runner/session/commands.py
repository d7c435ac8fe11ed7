"""What happens to a session from outside its steps: results arriving by continuation
token (`complete_calls`), and an operator's retry, freeze, revive (a failed session) and cancel."""

from __future__ import annotations

from collections.abc import Callable

from runner.session.gate import SessionError, UnknownToken
from runner.session.reports import CompletionReport
from runner.session.runtime import Opener
from runner.state import SessionTail, ToolResult, TrackedCall
from runner.state.transitions import finish, move_call, set_status
from runner.stores import Effect, SessionStore, VersionConflict

#: How often `complete_calls` re-reads and re-applies after losing a compare-and-set race.
COMPLETE_ATTEMPTS = 5


async def complete_calls(
    open_: Opener,
    session_id: str | None,
    results: list[tuple[str, ToolResult]],
    authorize: Callable[[TrackedCall], None] | None = None,
) -> CompletionReport:
    """Give open calls their results by token. A token whose call already ended is
    reported (already completed, conflicting, or late), not applied; an unknown token
    is an error and nothing is applied. `authorize`, when given, sees each call before
    anything else is decided and raises to refuse it (the server's worker tokens).
    `session_id` is None when the opener finds the session (by token)."""
    for _ in range(COMPLETE_ATTEMPTS):
        async with open_() as (rt, session, holder):
            session_id = session.id
            storage = rt.storage
            if any(session.call_by_token(t) is None for t, _ in results):
                # a call that ended before the last turn is not loaded: read them all
                session = await storage.run(storage.store.with_history, session)
            if authorize is not None:
                for token, _ in results:
                    if (found := session.call_by_token(token)) is not None:
                        authorize(found)
            if session.status == "cancelled":
                raise SessionError(f"session {session_id} is cancelled")
            applied: list[str] = []
            already: list[str] = []
            conflicting: list[str] = []
            late: list[str] = []
            now = rt.clock.now_ms()
            for token, result in results:
                call = session.call_by_token(token)
                if call is None:
                    raise UnknownToken(token)
                if call.state == "expired":
                    late.append(token)
                    if storage.durable is not None:
                        await storage.run(storage.durable.record_late, token, session.id,
                                          call.id, result)  # fmt: skip
                elif call.terminal:
                    (already if call.result == result else conflicting).append(token)
                else:
                    finish(call, result, now)
                    applied.append(token)
            reported = tuple(already), tuple(conflicting), tuple(late)
            if not applied:
                return CompletionReport(session, (), *reported)
            try:  # the last commit under the lease: it lets the lease go too
                await rt.settle_and_commit(session, holder, release=True)
            except VersionConflict:
                continue  # someone without a lease advanced it: re-read and re-apply
            return CompletionReport(session, tuple(applied), *reported)
    raise SessionError(
        f"session {session_id} kept changing; completing its calls gave up, try again"
    )


async def retry(open_: Opener, token: str, *, force: bool) -> SessionTail:
    """Run an `unknown_outcome` call again: only with `force`, since its first attempt
    may have had external effects. A deferred call (its claim lapsed) is deferred again,
    claimable by the next worker; any other call is ready for the next step."""
    async with open_() as (rt, session, holder):
        call = session.call_by_token(token)
        if call is None:
            raise UnknownToken(token)
        if call.state != "unknown_outcome":
            raise SessionError(f"call {call.id} is {call.state}; only a call in"
                               " unknown_outcome can be retried")  # fmt: skip
        if not force:
            raise SessionError(
                f"call {call.id} may already have had its external effects; give"
                " --force to run it again anyway, or settle it with session complete/fail"
            )
        storage = rt.storage
        deferred = call.defer_reason is not None
        if storage.durable is not None:
            abandoned = Effect(call.idempotency_key, session.id, call.id, call.attempts,
                               "external", "abandoned", None)  # fmt: skip
            await storage.run(storage.durable.record_effect, abandoned, holder.fences)
            if deferred:  # released before the call is deferred: never handed out lapsed
                await storage.run(storage.durable.reopen_claims, session.id, call.id)
        move_call(call, "deferred" if deferred else "ready", rt.clock.now_ms())
        call.result, call.next_attempt_ms = None, None
        await rt.settle_and_commit(session, holder)
        return session


def freeze(store: SessionStore, session_id: str) -> SessionTail:
    """Stop the session where it is until `session resume` (compare-and-set; no lease:
    an operator's word). Nothing steps a frozen session, workers included."""
    session = store.load(session_id, history=False)
    if session.status in ("completed", "cancelled", "failed"):
        raise SessionError(f"session {session_id} is {session.status}; nothing to freeze")
    set_status(session, "frozen")
    return store.save(session)


def revive(session: SessionTail) -> None:
    """A failed session back to running with a fresh model-call budget (`resume --retry`)."""
    if session.status != "failed":
        raise SessionError(f"session {session.id} is {session.status}, not failed;"
                           " --retry only applies to a failed session")  # fmt: skip
    set_status(session, "running")
    session.failure_reason = None
    session.llm_attempts, session.llm_next_attempt_ms = 0, None


def cancel(store: SessionStore, session_id: str, now_ms: int) -> SessionTail:
    """End the session and every call still open (compare-and-set, no lease)."""
    session = store.load(session_id, history=False)
    if session.status == "completed":
        raise SessionError(f"session {session_id} is completed; nothing to cancel")
    for call in session.open_calls():
        finish(call, ToolResult(status="cancelled", content="cancelled by an operator"), now_ms)
    set_status(session, "cancelled")
    return store.save(session)
