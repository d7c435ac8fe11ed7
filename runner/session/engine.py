"""`Engine`: the one object every front door calls (the CLI, the server, the console),
by session id or continuation token, for every operation on the sessions of one store.

    engine = Engine(SQLiteStore("s.db"), runner_for_spec, AuditSetting(), StoreAlignedClock())
    session = await engine.start(load_agent("agent.json").with_mode("asynchronous"), "go")
    report = await engine.resume(session.id)
    await engine.complete(token, ToolResult(status="ok", content="42"))

It is built from explicit arguments (it reads no environment: the front doors do) and
owns what a long-running process keeps between operations, each bounded: the stored
agents it has parsed (with their kept conversations, runner.session.prompt), at most
`agents_kept` of them, least recently used dropped; the audit sink it opened; the bus
its isolated calls publish their live output to (`call_output`, which the server's
event stream and the console subscribe to); the definitions with secret values it was
given (`keyring`, runner.session.secrets), which answer its stored agents.

An operation takes the session's lease and loads the session once, under it (gate.py's
`leased`); the session's agent hash names the agent, found among the kept ones (read
from the store the first time), and the rest of the gate and the operation run with it
(operations.py, commands.py: the same code DurableAgent runs for its one agent).
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import anyio.to_thread

from runner.isolation import Runner
from runner.llm import LLM
from runner.session import commands, operations
from runner.session.agent import Agent, remember
from runner.session.audit import AuditSetting, OpenedAudit, open_audit
from runner.session.gate import GateSettings, UnknownToken, admit, leased
from runner.session.operator import CONDITIONS, conditions, explain, session_document
from runner.session.output import CallOutputBus
from runner.session.reports import CompletionReport, StepReport
from runner.session.runners import SpecRunners
from runner.session.runtime import Opened, Opener, RunnerFactory
from runner.session.scheduler import DurableAgent, default_owner
from runner.session.secrets import Keyring
from runner.session.settings import DEFAULT_LEASE_SECONDS
from runner.session.storage import Storage, require_durable
from runner.session.stored import AGENTS_KEPT, StoredAgents
from runner.state import (
    Attachment,
    Clock,
    Session,
    SessionTail,
    StoreAlignedClock,
    ToolResult,
    TrackedCall,
)
from runner.state.transitions import overdue
from runner.stores import Continuation, DurableStore, Lease, SessionStore, SessionSummary, ToolCache
from runner.tools import ToolRegistry, default_tools

logger = logging.getLogger(__name__)

#: Refuses a call to a caller that may not answer it (the server's worker tokens).
Authorize = Callable[[TrackedCall], None]


@dataclass(frozen=True)
class Pending:
    """A session's open calls as `pending` shows them: the session (its tail), the
    ids of the calls whose expiry has passed, and the store's time that says so."""

    session: SessionTail
    overdue: frozenset[str]
    now_ms: int


@dataclass(frozen=True)
class Shown:
    """A session as an operator sees it (runner.session.operator): the whole session,
    its lease (None for a store without leases), the store's time, and the results
    that came after their calls ended (kept, not applied)."""

    session: Session
    lease: Lease | None
    now_ms: int
    late: list[tuple[str, ToolResult]]

    def document(self) -> dict[str, Any]:
        """What `session show --json` prints and GET /v1/sessions/{id} returns."""
        return session_document(self.session, self.lease, self.now_ms, self.late)

    def why(self) -> str:
        """Why the session is where it is, and what unsticks it, in words."""
        return explain(self.session, self.lease, self.now_ms)


@dataclass(frozen=True)
class Listed:
    """A session as `session list` shows it: its summary, its conditions (read from the
    whole session), and why it failed or was quarantined, if it was."""

    summary: SessionSummary
    conditions: list[str]
    failure_reason: str | None
    quarantine_reason: str | None


class Engine:
    """The sessions of one store, advanced for any agent they were started with.

    `runners` makes the runner a RunIsolated spec names (a warm pool's factory, say);
    `audit` is where each isolated call's record goes (a setting, opened at the first
    operation, or a sink already open); `clock` measures expiries and backoffs. The rest
    are the lease's terms (`owner`, `lease_s`, `lease_wait_s`, `poison_after`) and what
    every agent runs with (`tools`, `llm` in place of each agent's provider, a
    `deployment_runner` for every RunIsolated call, the `cache` decorator's store).
    `single_process`: accept a store that cannot fence (only this process advances it).
    `keyring`: where the definitions with secret values it is given are remembered, to
    share with another engine over the same sessions (None: its own).
    """

    def __init__(
        self,
        store: SessionStore,
        runners: RunnerFactory | None = None,
        audit: AuditSetting | OpenedAudit | None = None,
        clock: Clock | None = None,
        *,
        owner: str | None = None,
        lease_s: float = DEFAULT_LEASE_SECONDS,
        lease_wait_s: float | None = None,
        poison_after: int = 3,
        tools: ToolRegistry | None = None,
        llm: LLM | None = None,
        deployment_runner: Runner | None = None,
        cache: ToolCache | None = None,
        call_output: CallOutputBus | None = None,
        agents_kept: int = AGENTS_KEPT,
        single_process: bool = False,
        egress_network: str | None = None,
        keyring: Keyring | None = None,
    ) -> None:
        if not single_process:
            require_durable(store, "advancing sessions (step, resume, complete, workers)")
        self.store = store
        # The default's runners share one RunnerCaches: a worker described once, the
        # engine swept once, for every session this engine advances.
        self.runners = runners if runners is not None else SpecRunners()
        self._egress_network = egress_network
        self.clock = clock if clock is not None else StoreAlignedClock()
        self.call_output = call_output if call_output is not None else CallOutputBus()
        self.gate = GateSettings(owner or default_owner(), lease_s, lease_wait_s, poison_after)
        self._audit_setting = audit if audit is not None else AuditSetting()
        self._tools = tools if tools is not None else default_tools()
        self._llm, self._deployment_runner, self._cache = llm, deployment_runner, cache
        self._single_process = single_process
        #: The definitions with secret values this engine was given (runner.session.secrets):
        #: its stored agents are answered with them. Engines that advance the same
        #: sessions share one (`serve`'s server and session worker).
        self.keyring = keyring if keyring is not None else Keyring()
        self._agents = StoredAgents(store, self.agent, agents_kept, self.keyring)

    @property
    def owner(self) -> str:
        return self.gate.owner

    # --- agents ------------------------------------------------------------------------

    def agent(self, agent: Agent) -> DurableAgent:
        """`agent` run as this engine runs every agent (its runners, audit, bus, lease)."""
        return self._durable(agent, self._audit)

    def _durable(self, agent: Agent, audit: AuditSetting | OpenedAudit) -> DurableAgent:
        gate = self.gate
        return DurableAgent(
            agent, self.store, cache=self._cache, deployment_runner=self._deployment_runner,
            llm=self._llm, runner_factory=self.runners, tools=self._tools, clock=self.clock,
            owner=gate.owner, lease_s=gate.lease_s, lease_wait_s=gate.lease_wait_s,
            poison_after=gate.poison_after, single_process=self._single_process,
            call_output=self.call_output, audit=audit,
            egress_network=self._egress_network, keyring=self.keyring,
        )  # fmt: skip

    @property
    def agents_kept(self) -> int:
        """How many stored agents the engine keeps now (at most `agents_kept`)."""
        return len(self._agents)

    async def agent_of(self, agent_hash: str) -> DurableAgent:
        """The agent stored under `agent_hash`, kept (see the module)."""
        return await self._agents.of_hash(agent_hash)

    @cached_property
    def _audit(self) -> OpenedAudit:
        setting = self._audit_setting
        if isinstance(setting, OpenedAudit):
            return setting
        return OpenedAudit(open_audit(setting, self.store), setting.fail_closed)

    # --- operations by session id ------------------------------------------------------

    async def start(
        self, agent: Agent, prompt: str, attachments: Sequence[Attachment] = ()
    ) -> Session:
        """Store a new session of `agent` whose first turn is `prompt`; nothing runs yet
        (so the audit sink is not opened for it)."""
        durable = self._durable(agent, self._audit_setting)
        return await anyio.to_thread.run_sync(durable.start, prompt, attachments)

    async def resume(
        self,
        session_id: str,
        *,
        unfreeze: bool = True,
        unquarantine: bool = False,
        retry: bool = False,
        migrate: bool = False,
        lease_wait_s: float | None = None,
        agent: Agent | None = None,
        allow_agent_change: bool = False,
    ) -> StepReport:
        """Step until the final answer or the next wait (DurableAgent.resume); `migrate`
        upgrades a session of an older schema; `lease_wait_s` bounds the wait for a
        lease someone else holds; `agent` runs it instead of its stored agent (refused
        if they differ, unless `allow_agent_change`: then it is the session's agent)."""
        open_ = self._opener(session_id, lease_wait_s, migrate=migrate, agent=agent,
                             allow_agent_change=allow_agent_change)  # fmt: skip
        return await operations.resume(open_, unfreeze=unfreeze, unquarantine=unquarantine,
                                       retry=retry)  # fmt: skip

    async def step(self, session_id: str) -> StepReport:
        """One scheduling step, committed."""
        return await operations.step(self._opener(session_id))

    async def pause(self, session_id: str) -> StepReport:
        """agents-exe's pause: one step, persisted; the report's session names the calls
        it waits on."""
        return await self.step(session_id)

    async def run_isolated(self, session_id: str, agent: Agent | None = None) -> StepReport:
        """Run the detached RunIsolated calls the session waits on (with `agent` in place
        of its stored one: the env values of its specs, which the store never keeps)."""
        return await operations.run_isolated(self._opener(session_id, agent=agent))

    async def work(self, session_id: str) -> StepReport:
        """What the session worker does with a session the store offered as due: take
        its lease without waiting (LeaseBusy if someone has it), run its detached calls,
        resume it."""
        require_durable(self.store, "this operation")  # a worker never runs unfenced
        return await operations.work(self._opener(session_id, 0))

    async def complete_calls(
        self,
        session_id: str,
        results: Iterable[tuple[str, ToolResult]],
        authorize: Authorize | None = None,
    ) -> CompletionReport:
        """Give open calls their results by token (see commands.complete_calls)."""
        return await commands.complete_calls(self._opener(session_id), session_id, list(results),
                                   authorize)  # fmt: skip

    async def retry(self, session_id: str, token: str, *, force: bool = False) -> SessionTail:
        """Run an `unknown_outcome` call again: only with `force`."""
        return await commands.retry(self._opener(session_id), token, force=force)

    async def freeze(self, session_id: str) -> SessionTail:
        """Stop the session where it is, for every process, until `resume`."""
        return await anyio.to_thread.run_sync(commands.freeze, self.store, session_id)

    async def cancel(self, session_id: str) -> SessionTail:
        """End the session and every call still open."""
        now = self.clock.now_ms()
        return await anyio.to_thread.run_sync(commands.cancel, self.store, session_id, now)

    # --- reads (no lease: what an operator is shown) -----------------------------------

    async def pending(self, session_id: str) -> Pending:
        """The session's open calls (its tail holds them all), and which are overdue."""

        def read() -> Pending:
            session = self.store.load(session_id, history=False)
            now = self._now()
            late = overdue(session, now)
            return Pending(session, frozenset(c.id for c in late), now)

        return await anyio.to_thread.run_sync(read)

    async def show(self, session_id: str) -> Shown:
        """The whole session as an operator sees it (runner.session.operator)."""

        def read() -> Shown:
            session = self.store.load(session_id)
            durable = self._durable_store
            lease = durable.lease(session_id) if durable else None
            late = durable.late_results(session_id) if durable else []
            return Shown(session, lease, self._now(), late)

        return await anyio.to_thread.run_sync(read)

    async def list(self, condition: str | None = None) -> builtins.list[Listed]:
        """Every session in the store, oldest update first, with its conditions; only
        those in `condition` (one of operator.CONDITIONS), if given."""
        if condition is not None and condition not in CONDITIONS:
            raise ValueError(f"condition: expected one of {', '.join(CONDITIONS)},"
                             f" got {condition!r}")  # fmt: skip

        def read() -> builtins.list[Listed]:
            durable, now, rows = self._durable_store, self._now(), []
            for summary in self.store.list():
                session = self.store.load(summary.id)
                lease = durable.lease(summary.id) if durable else None
                found = conditions(session, lease, now)
                if condition is None or condition in found:
                    rows.append(Listed(summary, found, session.failure_reason,
                                       session.quarantine_reason))  # fmt: skip
            return rows

        return await anyio.to_thread.run_sync(read)

    async def holder(self, session_id: str) -> str | None:
        """Who holds the session's lease and is still renewing it, if anyone (nobody,
        in a store without leases)."""

        def read() -> str | None:
            durable = self._durable_store
            lease = durable.lease(session_id) if durable else None
            if lease is not None and lease.owner and lease.expires_ms > self._now():
                return lease.owner
            return None

        return await anyio.to_thread.run_sync(read)

    # --- operations by continuation token ----------------------------------------------

    async def find(self, token: str) -> Continuation:
        """The session and call a continuation token belongs to (UnknownToken if none)."""
        found = await anyio.to_thread.run_sync(self.store.find, token)
        if found is None:
            raise UnknownToken(token)
        return found

    async def complete(
        self, token: str, result: ToolResult, authorize: Authorize | None = None
    ) -> CompletionReport:
        """Give the call of `token` its result: two store calls on a durable store, one
        that finds the token's session, takes its lease and loads it, and the commit
        that lets the lease go (DurableStore.lease_and_load_token, save_and_release)."""
        return await commands.complete_calls(self._opener(token=token), None, [(token, result)],
                                   authorize)  # fmt: skip

    async def fail(
        self, token: str, reason: str, authorize: Authorize | None = None
    ) -> CompletionReport:
        """Fail the call of `token` with `reason` (what the model is told)."""
        return await self.complete(token, ToolResult.error("TOOL_FAILED", reason), authorize)

    # --- plumbing ----------------------------------------------------------------------

    @property
    def _durable_store(self) -> DurableStore | None:
        return self.store if isinstance(self.store, DurableStore) else None

    def _now(self) -> int:
        store = self.store
        return store.now_ms() if isinstance(store, DurableStore) else self.clock.now_ms()

    def _opener(
        self,
        session_id: str | None = None,
        wait_s: float | None = None,
        *,
        token: str | None = None,
        migrate: bool = False,
        agent: Agent | None = None,
        allow_agent_change: bool = False,
    ) -> Opener:
        gate = replace(self.gate, migrate=migrate, allow_agent_change=allow_agent_change)
        given = self.agent(agent) if agent is not None else None
        if agent is not None:  # its secret values, for the stored documents of it
            remember(agent, self.keyring)

        @asynccontextmanager
        async def opened() -> AsyncIterator[Opened]:
            storage = Storage(self.store)
            async with leased(storage, gate, session_id, wait_s, token=token) as (
                session,
                holder,
            ):
                durable = given or await self._agents.of_hash(session.agent_hash)
                async with durable.runtime(storage) as rt:
                    await admit(rt, gate, session, holder)
                    yield rt, session, holder

        return opened


__all__ = ["Authorize", "Engine", "Listed", "Pending", "Shown"]
