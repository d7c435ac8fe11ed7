"""Running one tracked call under its disposition, decorators included, to a ToolResult.

Decorators wrap the call from the outside in (the first listed is the outermost):
`timeout` bounds what it wraps, `retries` re-runs a retryable failure with jittered
exponential backoff, `cache` answers from the tool cache (and stores ok results),
`truncate` cuts an ok result to `maxBytes`, `label` only names the call.

Durability: an isolated attempt is counted in the store (`checkpoint`) before it starts
(an in-process one is stored with its result, in the step's commit), and a retry's
budget and next attempt time are stored before the backoff, so a restart neither resets
the count nor shortens the wait. RunIsolated calls become a v1 ToolCallRequest for
the runner their spec names, with an effect-ledger row written before the worker starts
and completed with its result envelope; an interrupted attempt is then settled by the
ledger (see `_recorded`), never by asking the model.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
from pydantic import ValidationError

from envelopes.agents_exe import (
    POLICY_EXTENSION,
    TURN_EXTENSION,
    docker_policy,
    local_process_policy,
)
from envelopes.codec import describe_validation_error, encode
from envelopes.v1 import (
    CODE_RETRYABLE,
    CallContext,
    Output,
    RequestLimits,
    ToolCallRequest,
    ToolCallResult,
    ToolRef,
    binding_retryable,
)
from runner.faults import crash_point
from runner.isolation import (
    CallOutcome,
    ContainerLimits,
    DockerRunner,
    LocalProcessRunner,
    Runner,
    RunnerCaches,
    owner_environment,
)
from runner.isolation.events import WorkerEvent
from runner.session.agent import Agent
from runner.session.bash_tools import context_environment, request_arguments, result_of
from runner.session.leases import Holder
from runner.session.output import LiveOutput, OutputTail
from runner.session.policy import (
    AnyDecorator,
    AnyDisposition,
    BaseDisposition,
    Cache,
    DockerSpec,
    Label,
    LocalProcessSpec,
    Retries,
    RunIsolated,
    Timeout,
    Truncate,
    unwrap,
)
from runner.session.runtime import Runtime
from runner.session.schemas import InvalidSchema, argument_error
from runner.state import SessionTail, ToolResult, TrackedCall
from runner.state.effects import unknown_if_interrupted, unknown_outcome
from runner.stores import Effect
from runner.stores.base import EffectState
from runner.tools import ToolFailure, invoke

logger = logging.getLogger(__name__)

Run = Callable[[], Awaitable[ToolResult]]
#: The tool name keyed cache entries are stored under; `@` is in no tool name.
KEYED_CACHE_TOOL = "@cache-key"
#: Errors a retry cannot fix, whatever the worker's `retryable` says: every code whose
#: column in section 5 (envelopes.v1.CODE_RETRYABLE, the single source) is "no".
NEVER_RETRIED = frozenset(code for code, retry in CODE_RETRYABLE.items() if retry is False)


def runner_for_spec(
    spec: DockerSpec | LocalProcessSpec, caches: RunnerCaches | None = None
) -> Runner:
    """The runner an isolation spec names: its image in Docker, or its argv locally,
    speaking the spec's envelope (v1, or agents-exe's for workers written for it), and
    sharing `caches` with its owner's other runners (None: its own)."""
    if isinstance(spec, DockerSpec):
        if caches is None:
            return DockerRunner(spec.image, container_limits(spec), envelope=spec.envelope)
        return DockerRunner(spec.image, container_limits(spec), envelope=spec.envelope,
                            capability_cache=caches.capabilities, sweeper=caches.sweeper,
                            runtimes=caches.runtimes)  # fmt: skip
    return LocalProcessRunner(
        spec.command, env={**spec.env, **owner_environment()}, envelope=spec.envelope,
        capability_cache=None if caches is None else caches.capabilities,
    )  # fmt: skip


def container_limits(spec: DockerSpec) -> ContainerLimits:
    """ContainerLimits' safe defaults, with what the spec sets instead."""
    d = ContainerLimits()
    return dataclasses.replace(
        d,
        memory_bytes=d.memory_bytes if spec.memory_bytes is None else spec.memory_bytes,
        cpus=d.cpus if spec.cpus is None else spec.cpus,
        pids=d.pids if spec.pids is None else spec.pids,
        tmpfs_bytes=d.tmpfs_bytes if spec.tmpfs_bytes is None else spec.tmpfs_bytes,
        network=d.network if spec.network is None else spec.network,
        runtime=d.runtime if spec.runtime is None else spec.runtime,
        egress=None if spec.egress is None else spec.egress.policy(),
    )


def stored_before_start(agent: Agent, call: TrackedCall, disposition: AnyDisposition) -> bool:
    """Whether the call is stored as running, and each attempt counted, before it starts:
    an isolated one (a worker gets it), or one whose effects may reach outside (declared
    `external`, or an undeclared tool). A contained in-process call is not worth commits
    of its own: if this process dies it runs again, from ready, as the same attempt, and
    its attempt and result are stored with the step's commit."""
    external = unknown_if_interrupted(agent.effects_of(call.tool))
    return external or isinstance(unwrap(disposition)[1], RunIsolated)


@dataclass
class CallExecutor:
    """Runs the calls of one step of `session`, under `holder`'s lease: every checkpoint
    and ledger row is written under its fence (stale: refused)."""

    rt: Runtime
    session: SessionTail
    holder: Holder

    async def run(self, call: TrackedCall, disposition: AnyDisposition) -> ToolResult:
        decorators, base = unwrap(disposition)
        run: Run = self._base(call, base)
        for decorator in reversed(decorators):
            run = self._wrap(decorator, run, call)
        return await run()

    async def checkpoint(self) -> None:
        """Commit the session as it is now."""
        await self.rt.commit(self.session, self.holder)

    # --- decorators ------------------------------------------------------------------

    def _wrap(self, decorator: AnyDecorator, inner: Run, call: TrackedCall) -> Run:
        match decorator:
            case Timeout(seconds=seconds):
                return lambda: _with_timeout(inner, seconds)
            case Retries(count=count, backoff_ms=backoff_ms):
                return lambda: self._with_retries(inner, call, count, backoff_ms)
            case Cache():
                return lambda: self._with_cache(inner, call, decorator)
            case Truncate(max_bytes=max_bytes):
                return lambda: _with_truncation(inner, max_bytes)
            case Label():
                return inner  # set when the call was classified
        raise TypeError(f"unknown decorator {decorator!r}")  # the union is closed

    async def _with_retries(
        self, inner: Run, call: TrackedCall, count: int, backoff_ms: int
    ) -> ToolResult:
        clock = self.rt.clock
        if call.max_attempts is None:
            call.max_attempts = count + 1
        while True:
            if call.next_attempt_ms is not None:  # a backoff begun before a restart, too
                await clock.sleep(max(0.0, (call.next_attempt_ms - clock.now_ms()) / 1000))
            result = await inner()
            if not retryable(result) or call.attempts >= call.max_attempts:
                call.next_attempt_ms = None
                return result
            call.last_error = result
            delay_ms = backoff_ms * 2 ** (call.attempts - 1) * (0.5 + random.random())
            call.next_attempt_ms = clock.now_ms() + int(delay_ms)
            logger.info("call %s of session %s: attempt %d failed (%s), retrying in %d ms",
                        call.id, self.session.id, call.attempts, result.error_code,
                        delay_ms)  # fmt: skip
            await self.checkpoint()
            crash_point("retry.backoff")

    async def _with_cache(self, inner: Run, call: TrackedCall, cache_spec: Cache) -> ToolResult:
        """Answer from the tool cache, else run and store an ok result. Without a `key`
        the entry is the call's own (its tool, its canonical arguments); with one it is
        the key's, shared by every call naming it: tool `KEYED_CACHE_TOOL` (no tool can
        have that name) and, as arguments, `{"key": KEY}` for a string key or agents-exe's
        `{"toolName", "argumentsHash"}` for an object one."""
        cache, storage = self.rt.cache, self.rt.storage
        if cache is None:
            return await inner()
        tool, arguments = call.tool, call.arguments
        if isinstance(cache_spec.key, str):
            tool, arguments = KEYED_CACHE_TOOL, {"key": cache_spec.key}
        elif cache_spec.key is not None:
            tool, arguments = KEYED_CACHE_TOOL, cache_spec.key.model_dump(by_alias=True)
        hit = await storage.run(cache.get, tool, arguments)
        if hit is not None:
            return hit
        result = await inner()
        if result.status == "ok":
            await storage.run(cache.put, tool, arguments, result, cache_spec.ttl_seconds)
        return result

    # --- the call itself -------------------------------------------------------------

    def _base(self, call: TrackedCall, base: BaseDisposition) -> Run:
        async def attempt() -> ToolResult:
            if isinstance(base, RunIsolated) and (recorded := await self._recorded(call)):
                return recorded
            if call.max_attempts is not None and call.attempts >= call.max_attempts:
                return call.last_error or ToolResult.error(
                    "RETRIES_EXHAUSTED", f"all {call.max_attempts} attempts were used"
                )
            call.attempts += 1
            if stored_before_start(self.rt.agent, call, base):
                await self.checkpoint()  # counted before it starts: a restart never resets it
            # An undeclared tool has no schema to check: a worker or a built-in of that
            # name gets its arguments as they are (and _builtin answers UNKNOWN_TOOL).
            spec = self.rt.agent.tool(call.tool)
            if spec is not None:
                try:
                    wrong = argument_error(spec.arguments_check, call.arguments)
                except InvalidSchema as exc:
                    why = f"the parameters schema of {call.tool!r} is not valid: {exc}"
                    return ToolResult.error("INVALID_REQUEST", why)
                if wrong is not None:
                    return ToolResult.error("INVALID_ARGUMENTS", wrong)
            if isinstance(base, RunIsolated):
                return await self._isolated(call, base)
            if spec is not None and spec.kind != "builtin":
                return ToolResult.error(
                    "PERMISSION_DENIED",
                    f"{call.tool!r} is a {spec.kind} tool: it never runs in-process;"
                    " the policy must isolate or defer it",
                )
            return await self._builtin(call)

        return attempt

    async def _builtin(self, call: TrackedCall) -> ToolResult:
        """A registered Python function: a synchronous one runs in a worker thread (both
        runSync and runAsync), so a slow tool never stalls the event loop."""
        function = self.rt.tools.lookup(call.tool)
        if function is None:
            return ToolResult.error("UNKNOWN_TOOL", f"no built-in tool {call.tool!r} is registered")
        try:
            value = await invoke(function, call.arguments)
        except ToolFailure as exc:
            return ToolResult.error("TOOL_FAILED", str(exc), exc.retryable)
        except Exception as exc:  # a tool's bug is the call's failure, not the runtime's
            logger.warning("built-in tool %s failed in call %s of session %s",
                           call.tool, call.id, self.session.id, exc_info=True)  # fmt: skip
            return ToolResult.error("INTERNAL", f"{type(exc).__name__}: {exc}")
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            return ToolResult.error(
                "INTERNAL", f"the tool returned a {type(value).__name__}, not JSON"
            )
        return ToolResult.ok(value)

    async def _recorded(self, call: TrackedCall) -> ToolResult | None:
        """What the ledger says of the call's latest attempt, when that settles it: its
        recorded result, or, for an attempt handed to a worker with external effects
        and never finished, UNKNOWN_OUTCOME. None: run a new attempt."""
        ledger = self.rt.storage.durable
        if ledger is None:
            return None
        effect = await self.rt.storage.run(ledger.effect, call.idempotency_key)
        if effect is None or call.attempts == 0 or effect.attempt != call.attempts:
            return None
        if effect.state == "completed" and effect.result is not None:
            if call.next_attempt_ms is not None:  # its failure was counted: back off, retry
                return None
            recorded = from_envelope(ToolCallResult.model_validate_json(effect.result))
            script = getattr(self.rt.agent.tool(call.tool), "script", None)
            if script is not None and recorded.status == "ok":  # as _isolated_on reads it
                return result_of(script, recorded.content)
            return recorded
        if effect.state == "started" and unknown_if_interrupted(effect.effects):
            return unknown_outcome(
                f"attempt {effect.attempt} was handed to its worker and the runner stopped"
                " before the outcome was recorded",
                "it is not run again",
                "an operator decides",
            )
        return None  # requested only, contained, or abandoned by an operator: run again

    async def _record(
        self, call: TrackedCall, state: EffectState, result: str | None = None
    ) -> None:
        ledger = self.rt.storage.durable
        if ledger is None:
            return
        effect = Effect(call.idempotency_key, self.session.id, call.id, call.attempts,
                        self.rt.agent.effects_of(call.tool), state, result)  # fmt: skip
        await self.rt.storage.run(ledger.record_effect, effect, self.holder.fences)

    async def _isolated(self, call: TrackedCall, base: RunIsolated) -> ToolResult:
        if self.rt.deployment_runner is not None:
            return await self._isolated_on(self.rt.deployment_runner, call, base)
        async with self.rt.runner_factory(base.spec) as runner:  # made for this call only
            return await self._isolated_on(runner, call, base)

    async def _isolated_on(
        self, runner: Runner, call: TrackedCall, base: RunIsolated
    ) -> ToolResult:
        runner = self.rt.audited(runner)  # the one place every isolated call is audited
        spec = base.spec
        extensions = None
        tool, arguments = call.tool, call.arguments
        script = getattr(self.rt.agent.tool(call.tool), "script", None)
        if script is not None:  # an agents-exe bash tool: the bash runner runs its script
            try:
                environment = context_environment(self.session.id, call.turn)
                tool, arguments = "bash", request_arguments(script, call.arguments, environment)
            except ValueError as exc:
                return ToolResult.error("INVALID_ARGUMENTS", str(exc))
        if spec.envelope == "agents-exe":  # what agents-exe's request has and v1's has not
            policy = (docker_policy(spec.image) if isinstance(spec, DockerSpec)
                      else local_process_policy(spec.command[0]))  # fmt: skip
            extensions = {POLICY_EXTENSION: policy, TURN_EXTENSION: call.turn}
        try:
            request = ToolCallRequest(
                id=call.token,
                tool=ToolRef(name=tool),
                arguments=arguments,
                deadline_ms=int((time.time() + spec.timeout_seconds) * 1000),  # the worker's clock
                limits=RequestLimits(max_result_bytes=spec.max_result_bytes),
                context=CallContext(
                    session_id=self.session.id,
                    call_id=call.id,
                    attempt=call.attempts,
                    idempotency_key=call.idempotency_key,
                ),
                extensions=extensions,
            )
        except ValidationError as exc:
            return ToolResult.error("INVALID_ARGUMENTS", describe_validation_error(exc))
        await self._record(call, "requested")
        crash_point("ledger.requested")
        await self._record(call, "started")
        outcome = await self._streamed(runner, request, call)
        await self._record(call, "completed", encode(outcome.result).decode())
        crash_point("ledger.completed")
        if script is not None and outcome.result.status == "ok":
            return result_of(script, from_outcome(outcome).content)
        return from_outcome(outcome)

    async def _streamed(
        self, runner: Runner, request: ToolCallRequest, call: TrackedCall
    ) -> CallOutcome:
        """`runner.call`, its worker's events published live as they come and their end
        kept as the call's `output`: stored by the commit that stores the result (or
        the one that sets the call back to ready when the step gives up on it), never
        by a commit of its own (runner.session.output)."""
        tail = OutputTail(call.attempts)
        bus, session_id, attempt = self.rt.call_output, self.session.id, call.attempts

        def on_event(event: WorkerEvent) -> None:
            tail.add(event)
            bus.publish(LiveOutput(session_id, call.id, call.tool, attempt, event))

        outcome: CallOutcome | None = None
        try:
            outcome = await runner.call(request, on_event=on_event)
            tail.absorb(outcome.events)
        finally:  # a cancelled attempt (timeout, a yield) keeps what it streamed too
            dropped, invalid = (0, 0) if outcome is None else (
                outcome.events_dropped, outcome.events_invalid)  # fmt: skip
            record = tail.record(dropped, invalid)
            if record is not None:  # else the last attempt that streamed keeps its own
                call.output = record  # assigned whole: a commit may be serializing the call
        return outcome


def retryable(result: ToolResult) -> bool:
    """Whether the retry decorator may run the call again: section 5's binding column for
    the code (a worker's `retryable` counts only where the worker decides, TOOL_FAILED)."""
    if result.status != "error":
        return False
    return binding_retryable(result.error_code or "", result.retryable)


def from_outcome(outcome: CallOutcome) -> ToolResult:
    """A runner's typed outcome as the result the model sees."""
    return from_envelope(outcome.result)


def from_envelope(result: ToolCallResult) -> ToolResult:
    """A worker's result envelope as the result the model sees."""
    if result.status == "ok" and result.output is not None:
        return from_output(result.output)
    assert result.error is not None
    return ToolResult.error(result.error.code, result.error.message, result.error.retryable)


def from_output(output: Output) -> ToolResult:
    """A v1 output (a worker's, or a UserToolResponse given by hand) as an ok result: a
    text or JSON output's content, a media or mixed output as its wire form."""
    wire = output.to_wire()
    return ToolResult.ok(wire["content"] if wire["type"] in ("text", "json") else wire)


async def _with_timeout(inner: Run, seconds: float) -> ToolResult:
    with anyio.move_on_after(seconds) as scope:
        return await inner()
    assert scope.cancelled_caught
    return ToolResult.error("DEADLINE_EXCEEDED", f"no result within {seconds:g}s", retryable=True)


async def _with_truncation(inner: Run, max_bytes: int) -> ToolResult:
    result = await inner()
    if result.status != "ok":
        return result
    text = result.content if isinstance(result.content, str) else json.dumps(result.content)
    data = text.encode()
    if len(data) <= max_bytes:
        return result
    kept = data[:max_bytes].decode("utf-8", errors="ignore")
    return ToolResult.ok(f"{kept}\n[truncated: {max_bytes} of {len(data)} bytes]")
