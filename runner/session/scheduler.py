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

Durability: step, resume, wake, run_isolated and `work` (the worker daemon's unit) hold
the session's lease (leases.py) and every commit carries its fencing token. On taking a
lease they check the session's schema version and agent hash, quarantine a session whose
holders keep dying (`poison_after` takeovers in a row), and expire deferred calls whose
time is up. Interrupted isolated calls are settled by the effect ledger (execute.py).
"""

from __future__ import annotations

import math
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from runner.isolation import Runner
from runner.llm import LLM, LLMRequest, Message, RequestedCall, ToolDefinition, provider_for
from runner.session.agent import Agent, AgentError, YieldOnTimeout, parse_agent
from runner.session.execute import CallExecutor, RunnerFactory, runner_for_spec
from runner.session.faults import crash_point
from runner.session.leases import Holder, hold
from runner.session.models import (
    SCHEMA_CHANGES,
    SESSION_SCHEMA_VERSION,
    UNKNOWN_OUTCOME,
    LlmTurn,
    PartialUserTurn,
    Session,
    ToolCall,
    ToolResult,
    ToolResultEntry,
    TrackedCall,
    UserTurn,
    migrate,
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
from runner.session.sweep import sweep_orphans
from runner.stores.base import Effect, ToolCache, VersionConflict

#: A `resume` that has not reached an answer after this many steps stops (a looping model).
MAX_STEPS_PER_RESUME = 64
#: How often `wake` re-reads and re-applies after losing a compare-and-set race.
WAKE_ATTEMPTS = 5
#: Seconds a lease lasts unless renewed (AGENTS_RUNNER_LEASE_SECONDS overrides).
DEFAULT_LEASE_SECONDS = 30.0


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def default_lease_seconds() -> float:
    return float(os.environ.get("AGENTS_RUNNER_LEASE_SECONDS", DEFAULT_LEASE_SECONDS))


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
    #: Who holds leases taken by this agent, and for how long each lasts unrenewed.
    owner: str = field(default_factory=default_owner)
    lease_s: float = field(default_factory=default_lease_seconds)
    #: How long to wait for someone else's lease (None: one lease period and a bit).
    lease_wait_s: float | None = None
    #: Holders that died in a row before a session is quarantined.
    poison_after: int = 3
    migrate: bool = False
    allow_agent_change: bool = False

    # --- sessions ----------------------------------------------------------------------

    def start(self, prompt: str) -> Session:
        session = Session.start(self.agent.slug, self.agent.hash, prompt)
        return self.store.create(session, self.agent.to_document())

    async def run(self, prompt: str) -> StepReport:
        """Start a session and resume it to the final answer or the first wait."""
        return await self.resume(self.start(prompt).id)

    async def resume(
        self, session_id: str, *, unpause: bool = True, unquarantine: bool = False
    ) -> StepReport:
        async with self._leased(session_id) as (session, holder):
            if (unpause and session.status == "paused") or (
                unquarantine and session.status == "quarantined"
            ):
                session.status, session.quarantine_reason = "running", None
                self._commit(session, holder)
            if session.status == "quarantined":
                raise SessionError(
                    f"session {session_id} is quarantined: {session.quarantine_reason}"
                )
            return await self._resume(session, holder)

    async def step(self, session_id: str) -> StepReport:
        async with self._leased(session_id) as (session, holder):
            return await self._step(session, holder)

    async def run_isolated(self, session_id: str) -> StepReport:
        """Run the detached RunIsolated calls the session waits on."""
        async with self._leased(session_id) as (session, holder):
            return await self._run_detached(session, holder)

    async def work(self, session_id: str) -> StepReport:
        """What a worker daemon does with a due session: take its lease without waiting
        (LeaseBusy if someone has it), run its detached calls, resume it."""
        async with self._leased(session_id, wait_s=0) as (session, holder):
            ran = (await self._run_detached(session, holder)).ran
            report = await self._resume(session, holder)
            return replace(report, ran=ran + report.ran)

    async def wake(self, session_id: str, results: Iterable[tuple[str, ToolResult]]) -> WakeReport:
        """Give open calls their results by token. A token whose call already ended is
        reported (already completed, conflicting, or late), not applied; an unknown token
        is an error and nothing is applied."""
        results = list(results)
        for _ in range(WAKE_ATTEMPTS):
            async with self._leased(session_id) as (session, holder):
                if session.status == "cancelled":
                    raise SessionError(f"session {session_id} is cancelled")
                applied, already, conflicting, late = [], [], [], []
                for token, result in results:
                    call = session.call_by_token(token)
                    if call is None:
                        raise UnknownToken(token)
                    if call.state == "expired":
                        late.append(token)
                        if hasattr(self.store, "record_late"):
                            self.store.record_late(token, session.id, call.id, result)
                    elif call.terminal:
                        (already if call.result == result else conflicting).append(token)
                    else:
                        _finish(call, result)
                        applied.append(token)
                if not applied:
                    return WakeReport(session, (), *map(tuple, (already, conflicting, late)))
                _fold_if_complete(session)
                if session.status == "waiting":
                    session.status = _status_after(session)
                try:
                    self._commit(session, holder)
                except VersionConflict:
                    continue  # someone without a lease advanced it: re-read and re-apply
                return WakeReport(session, tuple(applied),
                                  *map(tuple, (already, conflicting, late)))  # fmt: skip
        raise SessionError(f"session {session_id} kept changing; wake gave up, try again")

    async def retry(self, session_id: str, token: str, *, force: bool = False) -> Session:
        """Run an `unknown_outcome` call again: only with `force`, since its first
        attempt may have had external effects."""
        async with self._leased(session_id) as (session, holder):
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
            if hasattr(self.store, "record_effect"):
                abandoned = Effect(call.idempotency_key, session.id, call.id, call.attempts,
                                   "external", "abandoned", None)  # fmt: skip
                self.store.record_effect(abandoned, holder.fences)
            call.state, call.result, call.next_attempt_ms = "ready", None, None
            session.status = _status_after(session)
            self._commit(session, holder)
            return session

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

    # --- leases, versions, poison, expiry -----------------------------------------------

    @asynccontextmanager
    async def _leased(
        self, session_id: str, wait_s: float | None = None
    ) -> AsyncIterator[tuple[Session, Holder]]:
        """Hold the session's lease and hand over the session, checked and brought up
        to date: quarantined if its holders keep dying, versions checked, expiries due."""
        self.store.load(session_id)  # a missing session is SessionNotFound, not a lease
        wait = wait_s if wait_s is not None else (self.lease_wait_s or self.lease_s + 5)
        async with hold(self.store, session_id, self.owner, self.lease_s, wait) as holder:
            session = self.store.load(session_id)
            takeovers = holder.lease.takeovers if holder.lease else 0
            if takeovers >= self.poison_after and session.status in ("running", "waiting"):
                session.status = "quarantined"
                session.quarantine_reason = (
                    f"{takeovers} holders in a row died while advancing it; inspect it with"
                    " `session show`, then `session resume --unquarantine`"
                )
                self._commit(session, holder)
            elif takeovers:
                sweep_orphans()  # the dead holder's workers and containers must not linger
            self._check_versions(session, holder)
            if _expire_due(session):
                _fold_if_complete(session)
                session.status = _status_after(session)
                self._commit(session, holder)
            yield session, holder

    def _check_versions(self, session: Session, holder: Holder) -> None:
        if session.schema_version < SESSION_SCHEMA_VERSION:
            if not self.migrate:
                changes = "; ".join(SCHEMA_CHANGES[v] for v in range(
                    session.schema_version + 1, SESSION_SCHEMA_VERSION + 1))  # fmt: skip
                raise SessionError(
                    f"session {session.id} was written with session schema"
                    f" {session.schema_version}; this program uses {SESSION_SCHEMA_VERSION}"
                    f" ({changes}); give --migrate to upgrade it"
                )
            session.schema_version = migrate(session).schema_version
            self._commit(session, holder)
        changed = self._agent_changes(session)
        if changed:
            if not self.allow_agent_change:
                raise SessionError(
                    f"session {session.id} started with a different agent definition"
                    f" ({changed}); give --allow-agent-change to continue with this one"
                )
            self.store.put_agent(self.agent.hash, self.agent.to_document())
            session.agent_hash = self.agent.hash
            self._commit(session, holder)

    def _agent_changes(self, session: Session) -> str | None:
        """What differs between the session's stored agent and this one (its execution
        mode aside: commands may choose it), or None."""
        if session.agent_hash == self.agent.hash or not hasattr(self.store, "put_agent"):
            return None
        try:
            stored = parse_agent(self.store.agent_document(session.agent_hash), "stored agent")
        except AgentError as exc:
            return f"the stored definition no longer parses: {exc}"
        old = stored.with_mode("synchronous").to_document()
        new = self.agent.with_mode("synchronous").to_document()
        if old == new:
            return None
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if "tools" in keys:
            before = {t["name"]: t for t in old["tools"]}
            after = {t["name"]: t for t in new["tools"]}
            tools = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
            keys[keys.index("tools")] = f"tools: {', '.join(tools)}"
        return "changed: " + "; ".join(keys)

    def _commit(self, session: Session, holder: Holder) -> None:
        """Save under the lease's fence; the session object takes the new version."""
        if holder.fences:
            stored = self.store.save(session, holder.fences)
        else:
            stored = self.store.save(session)
        session.version, session.updated_ms = stored.version, stored.updated_ms

    # --- stepping ------------------------------------------------------------------------

    async def _resume(self, session: Session, holder: Holder) -> StepReport:
        ran: list[str] = []
        report = StepReport(session, "nothing")
        for _ in range(MAX_STEPS_PER_RESUME):
            if report.session.status != "running":
                break
            report = await self._step(report.session, holder)
            ran.extend(report.ran)
        return replace(report, ran=tuple(ran))

    async def _step(self, session: Session, holder: Holder) -> StepReport:
        if session.status == "paused":
            raise SessionError(f"session {session.id} is paused; `session resume` continues it")
        if session.status == "quarantined":
            raise SessionError(f"session {session.id} is quarantined: {session.quarantine_reason}")
        if session.status in ("completed", "cancelled"):
            return StepReport(session, "nothing")
        last = session.last_turn
        if isinstance(last, UserTurn):
            return await self._llm_step(session, holder)
        if isinstance(last, PartialUserTurn):
            return await self._call_step(session, holder)
        raise SessionError(f"session {session.id} ends with an LLM turn and no calls; corrupt?")

    async def _run_detached(self, session: Session, holder: Holder) -> StepReport:
        detached = [c for c in session.waiting_on() if c.state in ("ready", "running")]
        if not detached or session.status in ("paused", "quarantined", "cancelled"):
            return StepReport(session, "nothing")
        return await self._run_calls(session, detached, holder)

    # --- the two kinds of step ----------------------------------------------------------

    async def _llm_step(self, session: Session, holder: Holder) -> StepReport:
        llm = self.llm or provider_for(self.agent.provider)
        response = await llm.complete(self.llm_request(session))
        crash_point("llm.response")
        turn_index = len(session.turns)
        session.turns.append(LlmTurn(text=response.text, tool_calls=[
            ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in response.tool_calls
        ]))  # fmt: skip
        if not response.tool_calls:
            session.final_answer = response.text or ""
            session.status = "completed"
            self._commit(session, holder)
            return StepReport(session, "llm_turn")
        policy = self.policy or self.agent.policy
        context = PolicyContext(session.id, self.agent.slug, turn_index)
        for requested in response.tool_calls:
            call = self._track(session, turn_index, requested, policy, context)
            session.calls[call.id] = call
        session.turns.append(PartialUserTurn(call_ids=[c.id for c in response.tool_calls]))
        _fold_if_complete(session)
        session.status = _status_after(session)
        self._commit(session, holder)
        return StepReport(session, "llm_turn")

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
            expiry = base.expires_after_seconds or self.agent.async_call_timeout_seconds
            if expiry is not None:
                call.expires_ms = now_ms() + int(expiry * 1000)
        return call

    async def _call_step(self, session: Session, holder: Holder) -> StepReport:
        runnable = _runnable(session)
        if not runnable:
            _fold_if_complete(session)
            session.status = _status_after(session)
            self._commit(session, holder)
            return StepReport(session, "nothing")
        return await self._run_calls(session, runnable, holder)

    async def _run_calls(
        self, session: Session, calls: list[TrackedCall], holder: Holder
    ) -> StepReport:
        for call in calls:
            call.state, call.updated_ms = "running", now_ms()
        self._commit(session, holder)  # visible as running; a stale holder stops here
        ledger = self.store if hasattr(self.store, "record_effect") else None
        executor = CallExecutor(self.agent, session, self.cache, self.runner_factory,
                                self.deployment_runner, self.sleep, ledger,
                                lambda: self._commit(session, holder),
                                holder.fences)  # fmt: skip
        finished = await self._execute(executor, calls)
        for call in calls:
            if call.id in finished:
                _finish(call, finished[call.id])
            else:  # the step yielded before it finished: it runs again next step
                call.state = "ready"
        _fold_if_complete(session)
        session.status = _status_after(session)
        ran = tuple(c.id for c in calls if c.id in finished)
        self._commit(session, holder)
        return StepReport(session, "ran_calls", ran)

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
    if result.error_code == UNKNOWN_OUTCOME:
        call.state = "unknown_outcome"  # open: an operator settles it
    else:
        call.state = {"ok": "completed", "error": "failed"}.get(result.status, result.status)  # type: ignore[assignment]
    call.updated_ms = now_ms()


def _expire_due(session: Session) -> bool:
    """Move deferred calls whose expiry has passed to `expired`; True if any moved."""
    now, moved = now_ms(), False
    for call in session.open_calls():
        if call.state == "deferred" and call.expires_ms is not None and call.expires_ms <= now:
            waited = (call.expires_ms - call.created_ms) / 1000
            _finish(call, ToolResult(status="expired", error_code="EXPIRED", content=(
                f"no result arrived within {waited:g}s; the deferred call ({call.defer_reason})"
                " expired and will not be answered")))  # fmt: skip
            moved = True
    return moved


def _fold_if_complete(session: Session) -> None:
    """Turn the partial user turn into a user turn of results once every call has ended."""
    last = session.last_turn
    if not isinstance(last, PartialUserTurn):
        return
    calls = [session.call(i) for i in last.call_ids]
    if all(c.terminal for c in calls):
        entries = [ToolResultEntry(tool_call_id=c.id, tool=c.tool, result=c.result)
                   for c in calls if c.result is not None]  # fmt: skip
        session.replace_last_turn(UserTurn(tool_results=entries))


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
