"""Stepping a session held under its lease: one step, a resume, the detached calls.

A step does one thing and commits it with compare-and-set:
- after a user turn, it asks the LLM for the next turn (reading the whole history, the
  only step that needs it); tool calls are classified by the policy into tracked calls
  (ready, or deferred) under a partial user turn;
- under a partial user turn, it runs the ready calls (at most `maxConcurrency` at once),
  marked `running` in the store first;
- once every call of the turn has ended, the partial turn becomes a user turn of results
  and the next step asks the LLM again.
`resume` steps until the final answer or until the turn waits on calls only something
outside can finish (deferred ones, detached isolated ones).
"""

from __future__ import annotations

import math
from dataclasses import replace

import anyio

from runner.faults import crash_point
from runner.llm import RequestedCall
from runner.session.agent import YieldOnTimeout
from runner.session.execute import CallExecutor
from runner.session.gate import SessionError
from runner.session.leases import Holder
from runner.session.policy import (
    AnyDisposition,
    Decorate,
    Defer,
    Label,
    PolicyContext,
    RunSync,
    Timeout,
    from_json,
    to_json,
    unwrap,
)
from runner.session.prompt import llm_request
from runner.session.reports import StepReport
from runner.session.runtime import Runtime
from runner.state import (
    LlmTurn,
    PartialUserTurn,
    Session,
    ToolCall,
    ToolResult,
    TrackedCall,
    UserTurn,
    new_token,
)
from runner.state.transitions import finish, move_call, runnable, set_status

#: A `resume` that has not reached an answer after this many steps stops (a looping model).
MAX_STEPS_PER_RESUME = 64


async def resume(rt: Runtime, session: Session, holder: Holder) -> StepReport:
    ran: list[str] = []
    report = StepReport(session, "nothing")
    for _ in range(MAX_STEPS_PER_RESUME):
        if report.session.status != "running":
            break
        report = await step(rt, report.session, holder)
        ran.extend(report.ran)
    return replace(report, ran=tuple(ran))


async def step(rt: Runtime, session: Session, holder: Holder) -> StepReport:
    if session.status == "paused":
        raise SessionError(f"session {session.id} is paused; `session resume` continues it")
    if session.status == "quarantined":
        raise SessionError(f"session {session.id} is quarantined: {session.quarantine_reason}")
    if session.status in ("completed", "cancelled"):
        return StepReport(session, "nothing")
    last = session.last_turn
    if isinstance(last, UserTurn):
        return await _llm_step(rt, session, holder)
    if isinstance(last, PartialUserTurn):
        return await _call_step(rt, session, holder)
    raise SessionError(f"session {session.id} ends with an LLM turn and no calls; corrupt?")


async def run_detached(rt: Runtime, session: Session, holder: Holder) -> StepReport:
    """Run the detached RunIsolated calls the session waits on."""
    detached = [c for c in session.waiting_on() if c.state in ("ready", "running")]
    if not detached or session.status in ("paused", "quarantined", "cancelled"):
        return StepReport(session, "nothing")
    return await _run_calls(rt, session, detached, holder)


# --- the two kinds of step ----------------------------------------------------------------


async def _llm_step(rt: Runtime, session: Session, holder: Holder) -> StepReport:
    session = await rt.storage.run(rt.storage.store.with_history, session)
    response = await rt.llm.complete(llm_request(rt.agent, session))
    crash_point("llm.response")
    turn_index = session.turn_count
    session.turns.append(LlmTurn(text=response.text, tool_calls=[
        ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in response.tool_calls
    ]))  # fmt: skip
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
    return StepReport(session, "llm_turn")


def _track(
    rt: Runtime, session: Session, turn: int, requested: RequestedCall, context: PolicyContext
) -> TrackedCall:
    if requested.id in session.calls:
        raise SessionError(f"the LLM reused the tool call id {requested.id!r}")
    disposition = rt.policy(context, requested)
    decorators, base = unwrap(disposition)
    label = next((d.label for d in decorators if isinstance(d, Label)), None)
    now = rt.clock.now_ms()
    call = TrackedCall(
        id=requested.id, token=new_token(), tool=requested.name,
        arguments=requested.arguments, state="ready", disposition=to_json(disposition),
        turn=turn, label=label, idempotency_key=f"{session.id}/{requested.id}",
        created_ms=now, updated_ms=now,
    )  # fmt: skip
    if rt.agent.tool(requested.name) is None:
        finish(call, ToolResult.error("UNKNOWN_TOOL", f"there is no tool {requested.name!r}"), now)
    elif isinstance(base, Defer):
        call.state, call.defer_reason = "deferred", base.reason  # created deferred
        expiry = base.expires_after_seconds or rt.agent.async_call_timeout_seconds
        if expiry is not None:
            call.expires_ms = now + int(expiry * 1000)
    return call


async def _call_step(rt: Runtime, session: Session, holder: Holder) -> StepReport:
    calls = runnable(session)
    if not calls:
        await rt.settle_and_commit(session, holder)
        return StepReport(session, "nothing")
    return await _run_calls(rt, session, calls, holder)


async def _run_calls(
    rt: Runtime, session: Session, calls: list[TrackedCall], holder: Holder
) -> StepReport:
    now = rt.clock.now_ms()
    for call in calls:
        move_call(call, "running", now)
    await rt.commit(session, holder)  # visible as running; a stale holder stops here
    finished = await _execute(rt, CallExecutor(rt, session, holder), calls)
    now = rt.clock.now_ms()
    for call in calls:
        if call.id in finished:
            finish(call, finished[call.id], now)
        else:  # the step yielded before it finished: it runs again next step
            move_call(call, "ready", now)
    await rt.settle_and_commit(session, holder)
    return StepReport(session, "ran_calls", tuple(c.id for c in calls if c.id in finished))


async def _execute(
    rt: Runtime, executor: CallExecutor, calls: list[TrackedCall]
) -> dict[str, ToolResult]:
    """Run the calls: runSync ones first, one by one; then the others concurrently
    (at most maxConcurrency), waited for as the yield strategy says."""
    finished: dict[str, ToolResult] = {}
    plans = [(c, _disposition(rt, c)) for c in calls]
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


def _disposition(rt: Runtime, call: TrackedCall) -> AnyDisposition:
    disposition = from_json(call.disposition)
    limit = rt.agent.async_call_timeout_seconds
    if limit is not None and not isinstance(unwrap(disposition)[1], RunSync):
        disposition = Decorate(decorators=[Timeout(seconds=limit)], inner=disposition)
    return disposition
