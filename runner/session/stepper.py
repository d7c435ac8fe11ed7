"""Stepping a session held under its lease: one step, a resume, the detached calls.

A step does one thing and commits it with compare-and-set:
- after a user turn, it asks the LLM for the next turn (the request adds the turns since
  the last one to the messages kept for the session, see prompt.Conversations; the whole
  history is read only when they are not kept); tool calls are classified by the policy
  into tracked calls (ready, or deferred) under a partial user turn;
- under a partial user turn, it runs the ready calls (at most `maxConcurrency` at once),
  marked `running` in the store first when a worker gets them or their effects reach
  outside (execute.stored_before_start; a contained in-process call is not);
- once every call of the turn has ended, the partial turn becomes a user turn of results
  and the next step asks the LLM again.
`resume` steps until the final answer or until the turn waits on calls only something
outside can finish (deferred ones, detached isolated ones). In a resume, an agent
iteration (a model turn asking for in-process calls, their results) is two commits: the
model's answer, then the results with the next request's attempt counted.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import replace
from typing import Any, NamedTuple

import anyio

from runner.faults import crash_point
from runner.llm import LLMClosedError, LLMError, RequestedCall
from runner.session.agent import YieldOnTimeout
from runner.session.execute import CallExecutor, stored_before_start
from runner.session.gate import SessionError
from runner.session.leases import Holder
from runner.session.policy import (
    AnyDisposition,
    Decorate,
    Defer,
    Label,
    PolicyContext,
    RunIsolated,
    RunSync,
    Timeout,
    from_json,
    rebase,
    to_json,
    unwrap,
)
from runner.session.reports import StepReport
from runner.session.runtime import Runtime
from runner.session.secrets import redact, redacted_names, unavailable
from runner.state import (
    LlmTurn,
    PartialUserTurn,
    SessionTail,
    ToolCall,
    ToolResult,
    TrackedCall,
    UserTurn,
    new_token,
)
from runner.state.dispositions import detached
from runner.state.transitions import finish, move_call, runnable, set_status, settle

logger = logging.getLogger(__name__)

#: A `resume` that has not reached an answer after this many steps stops (a looping model).
MAX_STEPS_PER_RESUME = 64


class _Stepped(NamedTuple):
    """A step's report, and whether its commit already counted the attempt of the model
    call the next step makes (see `_commit_results`): what that step is handed."""

    report: StepReport
    attempt_counted: bool = False


async def resume(
    rt: Runtime, session: SessionTail, holder: Holder, *, stop_at_backoff: bool = False
) -> StepReport:
    """Step while the session is running. `stop_at_backoff` (a worker): stop instead of
    waiting out a model-call backoff, so the lease is let go and the session is due again,
    for whichever worker is free, once the backoff ends."""
    ran: list[str] = []
    stepped = _Stepped(StepReport(session, "nothing"))
    for n in range(MAX_STEPS_PER_RESUME):
        current = stepped.report.session
        if current.status != "running":
            break
        if stop_at_backoff and backoff_left_ms(current, rt.clock.now_ms()):
            break
        more = n + 1 < MAX_STEPS_PER_RESUME
        stepped = await _step(rt, current, holder, more=more, counted=stepped.attempt_counted)
        ran.extend(stepped.report.ran)
    return replace(stepped.report, ran=tuple(ran))


async def step(rt: Runtime, session: SessionTail, holder: Holder) -> StepReport:
    """One step."""
    return (await _step(rt, session, holder, more=False, counted=False)).report


async def _step(
    rt: Runtime, session: SessionTail, holder: Holder, *, more: bool, counted: bool
) -> _Stepped:
    """One step. `more`: the caller steps again at once while the session is running, so
    a step that ends with the calls' results counts the next model call's attempt in its
    own commit (see `_commit_results`). `counted`: the step before did that."""
    if session.status == "frozen":
        raise SessionError(f"session {session.id} is frozen; `session resume` continues it")
    if session.status == "failed":
        raise SessionError(f"session {session.id} failed: {session.failure_reason};"
                           " `session resume --retry` tries again")  # fmt: skip
    if session.status == "quarantined":
        raise SessionError(f"session {session.id} is quarantined: {session.quarantine_reason}")
    if session.status in ("completed", "cancelled"):
        return _Stepped(StepReport(session, "nothing"))
    last = session.last_turn
    if isinstance(last, UserTurn):
        return _Stepped(await _llm_step(rt, session, holder, counted))
    if isinstance(last, PartialUserTurn):
        return await _call_step(rt, session, holder, more)
    raise SessionError(f"session {session.id} ends with an LLM turn and no calls; corrupt?")


async def run_detached(rt: Runtime, session: SessionTail, holder: Holder) -> StepReport:
    """Run the detached RunIsolated calls the session waits on."""
    left = [c for c in session.waiting_on() if c.state in ("ready", "running")]
    if not left or session.status in ("frozen", "quarantined", "failed", "cancelled"):
        return StepReport(session, "nothing")
    return (await _run_calls(rt, session, left, holder)).report


# --- the two kinds of step ----------------------------------------------------------------


async def _llm_step(rt: Runtime, session: SessionTail, holder: Holder, counted: bool) -> StepReport:
    """Ask the LLM for the next turn, under the model-call budget stored with the session:
    wait out a backoff begun earlier (by this process or one that died), count the attempt
    in the store before the request (a kill mid-request still spends it; `counted`: the
    commit that made `session` did), and on failure either store the next attempt's time
    (retryable, budget left: still running) or fail the session (budget spent, or an
    error no retry can fix)."""
    budget = rt.agent.llm_retries
    if not counted:
        if session.llm_attempts >= budget.max_attempts:  # the last attempt was interrupted
            last = session.llm_last_error or "the last one was interrupted before it answered"
            return await _model_failed(rt, session, holder, f"all {budget.max_attempts}"
                                       f" attempts were used; last: {last}")  # fmt: skip
        wait_ms = backoff_left_ms(session, rt.clock.now_ms())
        if wait_ms > 0:
            await rt.clock.sleep(wait_ms / 1000)
        session.llm_attempts += 1
        await rt.commit(session, holder)
    crash_point("llm.request")
    prompt = rt.conversations.prompt(session)
    if prompt is None:  # the turns before the loaded ones are not kept: read them once
        prompt = rt.conversations.prompt(
            await rt.storage.run(rt.storage.store.with_history, session)
        )
    try:
        response = await rt.llm.complete(prompt.request)
    except LLMClosedError:
        raise  # the engine's own bug (a closed provider), not the model's failure
    except LLMError as exc:
        return await _model_error(rt, session, holder, exc)
    crash_point("llm.response")
    session.llm_attempts, session.llm_next_attempt_ms, session.llm_last_error = 0, None, None
    turn_index = session.turn_count
    answer = LlmTurn(text=response.text, tool_calls=[
        ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in response.tool_calls
    ])  # fmt: skip
    session.turns.append(answer)
    if not response.tool_calls:
        session.final_answer = response.text or ""
        set_status(session, "completed")
        await rt.commit(session, holder)
        return StepReport(session, "llm_turn")
    context = PolicyContext(session.id, rt.agent.slug, turn_index)
    for requested in response.tool_calls:
        call = _track(rt, session, turn_index, requested, context)
        session.calls[call.id] = call
    session.turns.append(PartialUserTurn(call_ids=[c.id for c in response.tool_calls]))
    await rt.settle_and_commit(session, holder)
    rt.conversations.answered(prompt, answer)  # stored now: the next request starts from it
    return StepReport(session, "llm_turn")


def backoff_left_ms(session: SessionTail, now_ms: int) -> int:
    """How long the session's next model call must still wait (0: it may start now)."""
    if session.llm_next_attempt_ms is None:
        return 0
    return max(0, session.llm_next_attempt_ms - now_ms)


async def _model_error(
    rt: Runtime, session: SessionTail, holder: Holder, exc: LLMError
) -> StepReport:
    budget, attempts = rt.agent.llm_retries, session.llm_attempts
    session.llm_last_error = str(exc)
    if not exc.retryable:
        return await _model_failed(rt, session, holder, f"not retryable: {exc}")
    if attempts >= budget.max_attempts:
        return await _model_failed(rt, session, holder, f"all {attempts} attempts failed;"
                                   f" last: {exc}")  # fmt: skip
    # Exponential with jitter (0.5x to 1.5x), at least what the server asked for, capped.
    delay_ms = budget.backoff_ms * 2 ** (attempts - 1) * (0.5 + random.random())
    if exc.retry_after_s is not None:
        delay_ms = max(delay_ms, exc.retry_after_s * 1000)
    delay_ms = min(delay_ms, budget.max_backoff_ms)
    session.llm_next_attempt_ms = rt.clock.now_ms() + int(delay_ms)
    logger.warning("session %s: model call attempt %d of %d failed (%s); next in %d ms",
                   session.id, attempts, budget.max_attempts, exc, delay_ms)  # fmt: skip
    await rt.commit(session, holder)
    crash_point("llm.backoff")
    return StepReport(session, "llm_retry")


async def _model_failed(rt: Runtime, session: SessionTail, holder: Holder, why: str) -> StepReport:
    session.failure_reason = f"the model call failed ({why})"
    session.llm_next_attempt_ms = None
    set_status(session, "failed")
    # INFO: the failure is the report's and the stored status's to tell, not a log line's.
    logger.info("session %s failed: %s", session.id, session.failure_reason)
    await rt.commit(session, holder)
    return StepReport(session, "llm_failed")


def _track(
    rt: Runtime, session: SessionTail, turn: int, requested: RequestedCall, context: PolicyContext
) -> TrackedCall:
    """The call as the runtime tracks it: ready, deferred, or ended at once.

    A tool the file does not declare still runs when the policy can run it: a registered
    built-in of that name, an isolated worker, or (deferred) whoever completes it; with
    none of those the model is told UNKNOWN_TOOL. A synchronous agent never waits on
    the outside (see `_synchronous`)."""
    if requested.id in session.calls:
        raise SessionError(f"the LLM reused the tool call id {requested.id!r}")
    disposition = rt.policy(context, requested)
    builtin = _has_builtin(rt, requested.name)
    failure: ToolResult | None = None
    if rt.agent.execution_mode == "synchronous":
        disposition, failure = _synchronous(disposition, builtin, requested.name)
    decorators, base = unwrap(disposition)
    label = next((d.label for d in decorators if isinstance(d, Label)), None)
    now = rt.clock.now_ms()
    call = TrackedCall(
        id=requested.id, token=new_token(), tool=requested.name,
        arguments=requested.arguments, state="ready",
        disposition=redact(to_json(disposition)),  # secret values are never stored
        turn=turn, label=label, idempotency_key=f"{session.id}/{requested.id}",
        created_ms=now, updated_ms=now,
    )  # fmt: skip
    declared = rt.agent.tool(requested.name) is not None
    if failure is None and not (declared or builtin or isinstance(base, RunIsolated | Defer)):
        failure = ToolResult.error("UNKNOWN_TOOL", f"there is no tool {requested.name!r}")
    if failure is not None:
        finish(call, failure, now)
    elif isinstance(base, Defer):
        call.state, call.defer_reason = "deferred", base.reason  # created deferred
        expiry = base.expires_after_seconds or rt.agent.async_call_timeout_seconds
        if expiry is not None:
            call.expires_ms = now + int(expiry * 1000)
    return call


def _has_builtin(rt: Runtime, name: str) -> bool:
    """A registered Python function runs the tool (an undeclared name, or a declared
    `builtin` tool; a `bash` or `external` tool never runs in-process)."""
    spec = rt.agent.tool(name)
    return name in rt.tools and (spec is None or spec.kind == "builtin")


def _synchronous(
    disposition: AnyDisposition, builtin: bool, tool: str
) -> tuple[AnyDisposition, ToolResult | None]:
    """What a synchronous agent does instead of waiting on the outside ("only asynchronous
    agents yield partial turns"): a detached isolated call runs attached; a deferred one
    runs its built-in, or fails saying deferral needs asynchronous mode. runAsync calls
    are awaited within the step (see `_execute`). Decorators are kept."""
    _, base = unwrap(disposition)
    if isinstance(base, RunIsolated) and detached(to_json(base)):
        return rebase(disposition, base.model_copy(update={"attached": True})), None
    if isinstance(base, Defer):
        if builtin:
            logger.info("synchronous agent: deferred call of %s runs its built-in", tool)
            return rebase(disposition, RunSync()), None
        return disposition, ToolResult.error(
            "UNAVAILABLE",
            f"the policy defers {tool!r} ({base.reason}), and deferral needs asynchronous"
            ' mode (executionMode "asynchronous"); this agent is synchronous and the tool'
            " has no built-in implementation to run instead",
        )
    return disposition, None


async def _call_step(rt: Runtime, session: SessionTail, holder: Holder, more: bool) -> _Stepped:
    calls = runnable(session)
    if not calls:
        await rt.settle_and_commit(session, holder)
        return _Stepped(StepReport(session, "nothing"))
    return await _run_calls(rt, session, calls, holder, more)


async def _run_calls(
    rt: Runtime, session: SessionTail, calls: list[TrackedCall], holder: Holder, more: bool = False
) -> _Stepped:
    now = rt.clock.now_ms()
    plans = [(c, _disposition(rt, session, c)) for c in calls]
    for call in calls:
        move_call(call, "running", now)
    if holder.lost or any(stored_before_start(rt.agent, c, d) for c, d in plans):
        await rt.commit(session, holder)  # visible as running; a stale holder stops here
    finished = await _execute(rt, CallExecutor(rt, session, holder), plans)
    now = rt.clock.now_ms()
    for call in calls:
        if call.id in finished:
            finish(call, finished[call.id], now)
        else:  # the step yielded before it finished: it runs again next step
            move_call(call, "ready", now)
    counted = await _commit_results(rt, session, holder, more)
    ran = tuple(c.id for c in calls if c.id in finished)
    return _Stepped(StepReport(session, "ran_calls", ran), counted)


async def _commit_results(rt: Runtime, session: SessionTail, holder: Holder, more: bool) -> bool:
    """Settle and commit the calls' results. When that makes a user turn of results and
    the next step (`more`) asks the model at once, the commit also counts that request's
    attempt, as `_llm_step` would in a commit of its own: the count is in the store
    before the request either way, and a process that dies in between has spent it,
    as one killed mid-request has. Returns whether it counted it."""
    settle(session)
    counted = (
        more
        and session.status == "running"
        and isinstance(session.last_turn, UserTurn)
        and session.llm_attempts < rt.agent.llm_retries.max_attempts
        and backoff_left_ms(session, rt.clock.now_ms()) == 0
    )
    if counted:
        session.llm_attempts += 1
    await rt.commit(session, holder)
    return counted


async def _execute(
    rt: Runtime, executor: CallExecutor, plans: list[tuple[TrackedCall, AnyDisposition]]
) -> dict[str, ToolResult]:
    """Run the calls: runSync ones first, one by one; then the others concurrently
    (at most maxConcurrency), waited for as the yield strategy says."""
    finished: dict[str, ToolResult] = {}
    for call, disposition in plans:
        if isinstance(unwrap(disposition)[1], RunSync):
            finished[call.id] = await executor.run(call, disposition)
    concurrent = [(c, d) for c, d in plans if c.id not in finished]
    if not concurrent:
        return finished
    agent = rt.agent
    limiter = anyio.CapacityLimiter(agent.max_concurrency)
    strategy = agent.async_yield_strategy
    asynchronous = agent.execution_mode == "asynchronous"
    progress = anyio.Event()

    async def one(call: TrackedCall, disposition: AnyDisposition) -> None:
        async with limiter:
            finished[call.id] = await executor.run(call, disposition)
        progress.set()

    wait_s = math.inf
    if asynchronous and isinstance(strategy, YieldOnTimeout):
        wait_s = strategy.milliseconds / 1000
    with anyio.move_on_after(wait_s):
        async with anyio.create_task_group() as group:
            for call, disposition in concurrent:
                group.start_soon(one, call, disposition)
            if asynchronous and strategy == "yieldOnAnyProgress":
                await progress.wait()
                group.cancel_scope.cancel()
    return finished


def _disposition(rt: Runtime, session: SessionTail, call: TrackedCall) -> AnyDisposition:
    disposition = from_json(call.disposition)
    if redacted_names(call.disposition):
        disposition = _with_secrets(rt, session, call, disposition)
    limit = rt.agent.async_call_timeout_seconds
    if limit is not None and not isinstance(unwrap(disposition)[1], RunSync):
        disposition = Decorate(decorators=[Timeout(seconds=limit)], inner=disposition)
    return disposition


def _with_secrets(
    rt: Runtime, session: SessionTail, call: TrackedCall, stored: AnyDisposition
) -> AnyDisposition:
    """The stored disposition with its spec's env values, which are never stored: the
    agent's policy gives the call its spec again, which must be the stored one, values
    aside. A process without the values (it never saw the agent definition that has
    them) refuses before the call starts, so the call waits for one that has them."""
    where = f"call {call.id} of session {session.id}"
    requested = RequestedCall(id=call.id, name=call.tool, arguments=call.arguments)
    fresh = rt.policy(PolicyContext(session.id, rt.agent.slug, call.turn), requested)
    _, base = unwrap(stored)
    _, now = unwrap(fresh)
    if not (isinstance(base, RunIsolated) and isinstance(now, RunIsolated)
            and redact(_spec_json(now)) == _spec_json(base)):  # fmt: skip
        raise SessionError(f"{where}: the agent's policy no longer gives the spec the call"
                           " was stored with, and its env values are never stored")  # fmt: skip
    missing = redacted_names(_spec_json(now))
    if missing:
        raise SessionError(unavailable(missing, where))
    return rebase(stored, base.model_copy(update={"spec": now.spec}))


def _spec_json(isolated: RunIsolated) -> dict[str, Any]:
    return isolated.spec.model_dump(mode="json", by_alias=True)
