"""The scheduler: `step`, `resume` and `wake` over a session held in a store.

A step reads the session, does one thing and commits it with compare-and-set:
- after a user turn, it asks the LLM for the next turn; tool calls are classified by the
  policy into tracked calls (ready, or deferred) under a partial user turn;
- under a partial user turn, it runs the ready calls (at most `maxConcurrency` at once),
  marked `running` in the store first;
- once every call of the turn has a terminal state, the partial turn becomes a user turn
  of results and the next step asks the LLM again.
`resume` steps until the final answer or until the turn waits on calls only something
outside can finish (deferred ones, detached isolated ones). `wake` injects those results
by continuation token, idempotently.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from runner.isolation import Runner
from runner.llm import LLM, LLMRequest, Message, RequestedCall, ToolDefinition, provider_for
from runner.session.agent import Agent, YieldOnTimeout
from runner.session.execute import CallExecutor, RunnerFactory, runner_for_spec
from runner.session.models import (
    LlmTurn,
    PartialUserTurn,
    Session,
    ToolCall,
    ToolResult,
    ToolResultEntry,
    TrackedCall,
    UserTurn,
    new_token,
    now_ms,
)
from runner.session.policy import (
    Decorate,
    Defer,
    Label,
    Policy,
    PolicyContext,
    RunSync,
    Timeout,
    from_json,
    to_json,
    unwrap,
)
from runner.stores.base import ToolCache, VersionConflict

#: A `resume` that has not reached an answer after this many steps stops (a looping model).
MAX_STEPS_PER_RESUME = 64
#: How often `wake` re-reads and re-applies after losing a compare-and-set race.
WAKE_ATTEMPTS = 5


class SessionError(Exception):
    """What was asked cannot be done to this session; the message says why."""


class UnknownToken(SessionError):
    def __init__(self, token: str) -> None:
        super().__init__(f"no call has the continuation token {token!r}")
        self.token = token


@dataclass(frozen=True)
class StepReport:
    """What one step (or a whole resume) did and where the session stands."""

    session: Session
    action: str  # llm_turn | ran_calls | nothing
    ran: tuple[str, ...] = ()  # ids of the calls run

    @property
    def status(self) -> str:
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
    entry = {"tool": call.tool, "tool_call_id": call.id, "continuation_token": call.token,
             "state": call.state}  # fmt: skip
    if call.defer_reason:
        entry["reason"] = call.defer_reason
    if call.label:
        entry["label"] = call.label
    return entry


@dataclass(frozen=True)
class WakeReport:
    session: Session
    applied: tuple[str, ...]
    already_completed: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session.id, "status": self.session.status,
                "applied": list(self.applied),
                "already_completed": list(self.already_completed),
                "open_calls": len(self.session.open_calls())}  # fmt: skip


@dataclass(frozen=True)
class DurableAgent:
    """An agent whose sessions live in a store: the library's entry point.

    `policy` defaults to the agent file's `toolCallPolicyConfig`; `llm` to its provider;
    `deployment_runner`, when set, runs every RunIsolated call instead of the runner the
    spec names; `cache` backs the `cache` decorator.
    """

    agent: Agent
    store: Any  # SessionStore + ContinuationStore
    cache: ToolCache | None = None
    deployment_runner: Runner | None = None
    llm: LLM | None = None
    policy: Policy | None = None
    runner_factory: RunnerFactory = runner_for_spec
    sleep: Callable[[float], Awaitable[None]] = field(default=anyio.sleep)

    # --- sessions ----------------------------------------------------------------------

    def start(self, prompt: str) -> Session:
        session = Session.start(self.agent.slug, self.agent.hash, prompt)
        return self.store.create(session, self.agent.to_document())

    async def run(self, prompt: str) -> StepReport:
        """Start a session and resume it to the final answer or the first wait."""
        return await self.resume(self.start(prompt).id)

    async def resume(self, session_id: str, *, unpause: bool = True) -> StepReport:
        session = self.store.load(session_id)
        if unpause and session.status == "paused":
            session.status = "running"
            self.store.save(session)
        ran: list[str] = []
        report = StepReport(self.store.load(session_id), "nothing")
        for _ in range(MAX_STEPS_PER_RESUME):
            if report.session.status != "running":
                break
            report = await self.step(session_id)
            ran.extend(report.ran)
        return replace(report, ran=tuple(ran))

    async def step(self, session_id: str) -> StepReport:
        session = self.store.load(session_id)
        if session.status == "paused":
            raise SessionError(f"session {session_id} is paused; `session resume` continues it")
        if session.status in ("completed", "cancelled"):
            return StepReport(session, "nothing")
        last = session.last_turn
        if isinstance(last, UserTurn):
            return await self._llm_step(session)
        if isinstance(last, PartialUserTurn):
            return await self._call_step(session)
        raise SessionError(f"session {session_id} ends with an LLM turn and no calls; corrupt?")

    async def wake(self, session_id: str, results: Iterable[tuple[str, ToolResult]]) -> WakeReport:
        """Give open calls their results by token. A token whose call already ended is
        reported, not applied again; an unknown token is an error and nothing is applied."""
        results = list(results)
        for _ in range(WAKE_ATTEMPTS):
            session = self.store.load(session_id)
            if session.status == "cancelled":
                raise SessionError(f"session {session_id} is cancelled")
            applied, already = [], []
            for token, result in results:
                call = session.call_by_token(token)
                if call is None:
                    raise UnknownToken(token)
                if call.terminal:
                    already.append(token)
                    continue
                _finish(call, result)
                applied.append(token)
            if not applied:
                return WakeReport(session, (), tuple(already))
            _fold_if_complete(session)
            if session.status == "waiting":
                session.status = _status_after(session)
            try:
                return WakeReport(self.store.save(session), tuple(applied), tuple(already))
            except VersionConflict:
                continue  # someone else advanced it: re-read and apply what is still open
        raise SessionError(f"session {session_id} kept changing; wake gave up, try again")

    def pause(self, session_id: str) -> Session:
        session = self.store.load(session_id)
        if session.status in ("completed", "cancelled"):
            raise SessionError(f"session {session_id} is {session.status}; nothing to pause")
        session.status = "paused"
        return self.store.save(session)

    def cancel(self, session_id: str) -> Session:
        session = self.store.load(session_id)
        if session.status == "completed":
            raise SessionError(f"session {session_id} is completed; nothing to cancel")
        for call in session.open_calls():
            _finish(call, ToolResult(status="cancelled", content="cancelled by an operator"))
        session.status = "cancelled"
        return self.store.save(session)

    async def run_isolated(self, session_id: str) -> StepReport:
        """Run the detached RunIsolated calls the session waits on."""
        session = self.store.load(session_id)
        detached = [c for c in session.waiting_on() if c.state != "deferred"]
        if not detached:
            return StepReport(session, "nothing")
        return await self._run_calls(session, detached)

    # --- the two kinds of step ----------------------------------------------------------

    async def _llm_step(self, session: Session) -> StepReport:
        llm = self.llm or provider_for(self.agent.provider)
        response = await llm.complete(self.llm_request(session))
        turn_index = len(session.turns)
        session.turns.append(LlmTurn(text=response.text, tool_calls=[
            ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in response.tool_calls
        ]))  # fmt: skip
        if not response.tool_calls:
            session.final_answer = response.text or ""
            session.status = "completed"
            return StepReport(self.store.save(session), "llm_turn")
        policy = self.policy or self.agent.policy
        context = PolicyContext(session.id, self.agent.slug, turn_index)
        for requested in response.tool_calls:
            call = self._track(session, turn_index, requested, policy, context)
            session.calls[call.id] = call
        session.turns.append(PartialUserTurn(call_ids=[c.id for c in response.tool_calls]))
        _fold_if_complete(session)
        session.status = _status_after(session)
        return StepReport(self.store.save(session), "llm_turn")

    def _track(self, session: Session, turn: int, requested: RequestedCall, policy: Policy,
               context: PolicyContext) -> TrackedCall:  # fmt: skip
        if requested.id in session.calls:
            raise SessionError(f"the LLM reused the tool call id {requested.id!r}")
        disposition = policy(context, requested)
        decorators, base = unwrap(disposition)
        label = next((d.label for d in decorators if isinstance(d, Label)), None)
        call = TrackedCall(
            id=requested.id, token=new_token(), tool=requested.name,
            arguments=requested.arguments, state="ready", disposition=to_json(disposition),
            turn=turn, label=label, idempotency_key=f"{session.id}/{requested.id}",
        )  # fmt: skip
        if self.agent.tool(requested.name) is None:
            _finish(call, ToolResult.error("UNKNOWN_TOOL", f"there is no tool {requested.name!r}"))
        elif isinstance(base, Defer):
            call.state, call.defer_reason = "deferred", base.reason
        return call

    async def _call_step(self, session: Session) -> StepReport:
        runnable = _runnable(session)
        if not runnable:
            _fold_if_complete(session)
            session.status = _status_after(session)
            return StepReport(self.store.save(session), "nothing")
        return await self._run_calls(session, runnable)

    async def _run_calls(self, session: Session, calls: list[TrackedCall]) -> StepReport:
        for call in calls:
            call.state, call.updated_ms = "running", now_ms()
        session = self.store.save(session)  # visible as running; a stale runner stops here
        calls = [session.calls[c.id] for c in calls]
        executor = CallExecutor(self.agent, session, self.cache, self.runner_factory,
                                self.deployment_runner, self.sleep)  # fmt: skip
        finished = await self._execute(executor, calls)
        for call in calls:
            if call.id in finished:
                _finish(call, finished[call.id])
            else:  # the step yielded before it finished: it runs again next step
                call.state = "ready"
        _fold_if_complete(session)
        session.status = _status_after(session)
        ran = tuple(c.id for c in calls if c.id in finished)
        return StepReport(self.store.save(session), "ran_calls", ran)

    async def _execute(
        self, executor: CallExecutor, calls: list[TrackedCall]
    ) -> dict[str, ToolResult]:
        """Run the calls: runSync ones first, one by one; then the others concurrently
        (at most maxConcurrency), waited for as the yield strategy says."""
        finished: dict[str, ToolResult] = {}
        plans = [(c, self._disposition(c)) for c in calls]
        for call, disposition in plans:
            if isinstance(unwrap(disposition)[1], RunSync):
                finished[call.id] = await executor.run(call, disposition)
        concurrent = [(c, d) for c, d in plans if c.id not in finished]
        if not concurrent:
            return finished
        limiter = anyio.CapacityLimiter(self.agent.max_concurrency)
        strategy = self.agent.async_yield_strategy
        asynchronous = self.agent.execution_mode == "asynchronous"
        progress = anyio.Event()

        async def one(call: TrackedCall, disposition: Any) -> None:
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

    def _disposition(self, call: TrackedCall) -> Any:
        disposition = from_json(call.disposition)
        limit = self.agent.async_call_timeout_seconds
        if limit is not None and not isinstance(unwrap(disposition)[1], RunSync):
            disposition = Decorate(decorators=[Timeout(seconds=limit)], inner=disposition)
        return disposition

    # --- the conversation as the LLM sees it --------------------------------------------

    def llm_request(self, session: Session) -> LLMRequest:
        messages: list[Message] = []
        for turn in session.turns:
            if isinstance(turn, UserTurn):
                if turn.text is not None:
                    messages.append(Message("user", turn.text))
                messages.extend(
                    Message("tool", e.result.text(), tool_call_id=e.tool_call_id)
                    for e in turn.tool_results
                )
            elif isinstance(turn, LlmTurn):
                calls = tuple(RequestedCall(c.id, c.name, c.arguments) for c in turn.tool_calls)
                messages.append(Message("assistant", turn.text, calls))
        tools = tuple(ToolDefinition(t.name, t.description, t.parameters) for t in self.agent.tools)
        return LLMRequest(self.agent.system_prompt, tuple(messages), tools)


def _finish(call: TrackedCall, result: ToolResult) -> None:
    call.result = result
    call.state = {"ok": "completed", "error": "failed"}.get(result.status, result.status)  # type: ignore[assignment]
    call.updated_ms = now_ms()


def _fold_if_complete(session: Session) -> None:
    """Turn the partial user turn into a user turn of results once every call has ended."""
    last = session.last_turn
    if not isinstance(last, PartialUserTurn):
        return
    calls = [session.calls[i] for i in last.call_ids]
    if all(c.terminal for c in calls):
        entries = [ToolResultEntry(tool_call_id=c.id, tool=c.tool, result=c.result)
                   for c in calls if c.result is not None]  # fmt: skip
        session.turns[-1] = UserTurn(tool_results=entries)


def _status_after(session: Session) -> str:
    if isinstance(session.last_turn, UserTurn):
        return "running"
    if session.waiting_on() and not _runnable(session):
        return "waiting"
    return "running"


def _runnable(session: Session) -> list[TrackedCall]:
    """Open calls a step runs itself: ready (or left running by a process that died),
    and not waiting for something outside."""
    outside = {c.id for c in session.waiting_on()}
    return [c for c in session.open_calls()
            if c.state in ("ready", "running") and c.id not in outside]  # fmt: skip


def with_durable_workflows(agent: Agent, store: Any) -> DurableAgent:
    """An agent whose sessions are kept in `store` (e.g. runner.stores.SQLiteStore)."""
    return DurableAgent(agent, store)


def with_tool_cache(agent: DurableAgent, cache: ToolCache) -> DurableAgent:
    """Back the agent's `cache` decorators with `cache`."""
    return replace(agent, cache=cache)


def with_deployment_runner(agent: DurableAgent, runner: Runner) -> DurableAgent:
    """Run every RunIsolated call of the agent through `runner`."""
    return replace(agent, deployment_runner=runner)
