"""`DurableAgent`: the library's entry point to the session engine.

It holds what the engine runs with (agent, store, LLM, policy, tools, runners, clock,
lease settings) and states what it needs of the store: a store that cannot fence
(no DurableStore) is refused when the agent is made, unless `single_process=True` says
that only this process advances its sessions. Each operation builds a Runtime, passes
the gate (gate.py: lease, versions, poison, expiry) and then steps (stepper.py) or
applies an operator command (commands.py). Every commit carries the lease's fence.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property

import anyio.to_thread

from runner.isolation import Runner
from runner.llm import (
    LLM,
    EnvironmentProvider,
    LLMRequest,
    OpenAIProvider,
    ProviderConfig,
    provider_for,
)
from runner.session import commands, operations
from runner.session.agent import Agent, remember
from runner.session.audit import AuditSetting, OpenedAudit, open_audit
from runner.session.gate import GateSettings, open_session
from runner.session.output import CallOutputBus
from runner.session.policy import DockerSpec, LocalProcessSpec, Policy
from runner.session.prompt import Conversations, llm_request
from runner.session.reports import CompletionReport, StepReport
from runner.session.runners import SpecRunners
from runner.session.runtime import Opened, Opener, RunnerFactory, Runtime
from runner.session.secrets import Keyring
from runner.session.settings import DEFAULT_LEASE_SECONDS, AgentSettings, with_egress_network
from runner.session.storage import Storage, require_durable
from runner.state import (
    Attachment,
    Clock,
    Session,
    SessionTail,
    StoreAlignedClock,
    ToolResult,
    UserTurn,
)
from runner.stores import DurableStore, SessionStore, ToolCache
from runner.tools import ToolRegistry, default_tools

logger = logging.getLogger(__name__)


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class DurableAgent:
    """An agent whose sessions live in a store.

    `policy` defaults to the agent file's `toolCallPolicyConfig`; `llm` to its provider
    (made per operation and closed after it; an `llm` given here is the caller's to
    close); `deployment_runner`, when set, runs every RunIsolated call instead of the
    runner the spec names; `cache` backs the `cache` decorator; `tools` holds the
    built-in Python tools; `clock` measures expiries and backoffs; `audit` says where
    the record of each isolated call goes (runner.session.audit; default: the store).
    """

    agent: Agent
    store: SessionStore
    cache: ToolCache | None = None
    deployment_runner: Runner | None = None
    llm: LLM | None = None
    policy: Policy | None = None
    #: Builds the runner each isolated call's spec names; the default shares one
    #: RunnerCaches between them (a worker described once, the engine swept once).
    runner_factory: RunnerFactory = field(default_factory=SpecRunners, compare=False)
    tools: ToolRegistry = field(default_factory=default_tools)
    clock: Clock = field(default_factory=StoreAlignedClock)
    #: Who holds leases taken by this agent, and for how long each lasts unrenewed.
    owner: str = field(default_factory=default_owner)
    lease_s: float = DEFAULT_LEASE_SECONDS
    #: How long to wait for someone else's lease (None: one lease period and a bit).
    lease_wait_s: float | None = None
    #: Holders that died in a row before a session is quarantined.
    poison_after: int = 3
    migrate: bool = False
    allow_agent_change: bool = False
    #: Accept a store that cannot fence: only this process advances its sessions.
    single_process: bool = False
    #: Where the events isolated calls stream are published live (runner.session.output;
    #: an Engine gives each of its agents its own one bus).
    call_output: CallOutputBus = field(default_factory=CallOutputBus, compare=False)
    #: The messages sent to the model so far, per session: each request adds only the
    #: turns since the last one (runner.session.prompt).
    conversations: Conversations = field(init=False, repr=False, compare=False)
    #: Where each isolated call's audit record goes (runner.session.audit): the store's
    #: audit log unless the setting given here says otherwise; an Engine gives its
    #: agents the sink it opened (OpenedAudit).
    audit: AuditSetting | OpenedAudit = field(default_factory=AuditSetting)
    #: The network egress proxies go out through when a spec's `egress` names none.
    egress_network: str | None = None
    #: Where the definitions with secret values this agent is given are remembered, for
    #: the stored documents of them read later (runner.session.secrets); an Engine gives
    #: each of its agents its own one keyring.
    keyring: Keyring = field(default_factory=Keyring, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "conversations", Conversations(self.agent))
        if not isinstance(self.store, SessionStore):
            raise TypeError(f"store: expected a SessionStore, got {type(self.store).__name__}")
        if not self.single_process:
            require_durable(self.store, "advancing sessions (step, resume, complete, workers)")
        elif not isinstance(self.store, DurableStore):
            logger.info("%s cannot fence: sessions are safe only while this one process"
                        " advances them", self.store.description)  # fmt: skip

    # --- sessions ----------------------------------------------------------------------

    def start(self, prompt: str, attachments: Sequence[Attachment] = ()) -> Session:
        """Store a new session whose first turn is `prompt` and its `attachments`
        (runner.session.attachments reads them from files); nothing runs yet."""
        session = Session.start(self.agent.slug, self.agent.hash, prompt)
        if isinstance(self.store, DurableStore):  # stamped on the clock workers compare with
            session.created_ms = session.updated_ms = self.store.now_ms()
        if attachments:
            session.turns[0] = UserTurn(text=prompt, attachments=list(attachments))
        remember(self.agent, self.keyring)  # the store gets the document without its values
        return self.store.create(session, self.agent.to_document())

    async def run(self, prompt: str, attachments: Sequence[Attachment] = ()) -> StepReport:
        """Start a session and resume it to the final answer or the first wait."""
        created = await anyio.to_thread.run_sync(self.start, prompt, attachments)
        return await self.resume(created.id)

    async def resume(
        self,
        session_id: str,
        *,
        unfreeze: bool = True,
        unquarantine: bool = False,
        retry: bool = False,
    ) -> StepReport:
        """Step until the final answer or the next wait. `unfreeze`: a frozen session
        runs again; `unquarantine`: so does a quarantined one; `retry`: so does a failed
        one, with a fresh model-call budget (without it, a failed session is refused)."""
        return await operations.resume(self.opener(session_id), unfreeze=unfreeze,
                                       unquarantine=unquarantine, retry=retry)  # fmt: skip

    async def step(self, session_id: str) -> StepReport:
        return await operations.step(self.opener(session_id))

    async def run_isolated(self, session_id: str) -> StepReport:
        """Run the detached RunIsolated calls the session waits on."""
        return await operations.run_isolated(self.opener(session_id))

    async def work(self, session_id: str) -> StepReport:
        """What a session worker does with a due session: take its lease without waiting
        (LeaseBusy if someone has it), run its detached calls, resume it."""
        require_durable(self.store, "this operation")  # a worker never runs unfenced
        return await operations.work(self.opener(session_id, 0))

    async def complete_calls(
        self, session_id: str, results: Iterable[tuple[str, ToolResult]]
    ) -> CompletionReport:
        """Give open calls their results by token (see commands.complete_calls)."""
        return await commands.complete_calls(self.opener(session_id), session_id, list(results))

    async def retry(self, session_id: str, token: str, *, force: bool = False) -> SessionTail:
        """Run an `unknown_outcome` call again: only with `force`."""
        return await commands.retry(self.opener(session_id), token, force=force)

    def freeze(self, session_id: str) -> SessionTail:
        """Stop the session from being stepped until `resume`. Synchronous (one store
        call): from async code, call it in a worker thread."""
        return commands.freeze(self.store, session_id)

    def cancel(self, session_id: str) -> SessionTail:
        """Synchronous (one store call): from async code, call it in a worker thread."""
        return commands.cancel(self.store, session_id, self.clock.now_ms())

    def llm_request(self, session: Session) -> LLMRequest:
        """The LLM's next request for `session` (which must hold its whole history)."""
        return llm_request(self.agent, session)

    # --- plumbing ----------------------------------------------------------------------

    @cached_property
    def _audit(self) -> OpenedAudit:
        """Opened at the first operation, so that a copy made with another `audit`
        (dataclasses.replace) never opens, or warns about, the one it replaces."""
        if isinstance(self.audit, OpenedAudit):
            return self.audit
        return OpenedAudit(open_audit(self.audit, self.store), self.audit.fail_closed)

    def _runner_factory(self, spec: DockerSpec | LocalProcessSpec) -> Runner:
        return self.runner_factory(with_egress_network(spec, self.egress_network))

    @property
    def gate(self) -> GateSettings:
        return GateSettings(self.owner, self.lease_s, self.lease_wait_s, self.poison_after,
                            self.migrate, self.allow_agent_change)  # fmt: skip

    def opener(self, session_id: str, wait_s: float | None = None) -> Opener:
        """The gate for `session_id`, with a Runtime made for this agent before it."""

        @asynccontextmanager
        async def opened() -> AsyncIterator[Opened]:
            async with (
                self.runtime(Storage(self.store)) as rt,
                open_session(rt, self.gate, session_id, wait_s) as (session, holder),
            ):
                yield rt, session, holder

        return opened

    @asynccontextmanager
    async def runtime(self, storage: Storage) -> AsyncIterator[Runtime]:
        """What one operation runs with; an LLM made here is closed when it ends."""
        llm = self.llm if self.llm is not None else provider_for(single_attempt(self.agent))
        audit = self._audit
        try:
            yield Runtime(
                agent=self.agent, storage=storage, llm=llm,
                policy=self.policy or self.agent.policy, tools=self.tools, clock=self.clock,
                runner_factory=self._runner_factory, conversations=self.conversations,
                deployment_runner=self.deployment_runner, cache=self.cache,
                audit=audit.sink, audit_fail_closed=audit.fail_closed,
                call_output=self.call_output, keyring=self.keyring,
            )  # fmt: skip
        finally:
            if self.llm is None:
                await llm.aclose()


def single_attempt(agent: Agent) -> ProviderConfig:
    """The agent's provider making one request per call: the engine retries model calls
    itself, under the budget it stores with the session (`llmRetries`), so the provider's
    own `maxRetries` would multiply that budget unseen. An `llm` given to DurableAgent is
    the caller's: it should make one attempt per call too."""
    config = agent.provider
    if isinstance(config, OpenAIProvider | EnvironmentProvider):
        return config.model_copy(update={"max_retries": 0})
    return config


def with_durable_workflows(
    agent: Agent,
    store: SessionStore,
    *,
    single_process: bool = False,
    settings: AgentSettings | None = None,
) -> DurableAgent:
    """An agent whose sessions are kept in `store` (e.g. runner.stores.SQLiteStore), run
    as `settings` say (lease length, audit, egress network; None: the defaults)."""
    settings = settings or AgentSettings()
    return DurableAgent(agent, store, single_process=single_process, lease_s=settings.lease_s,
                        audit=settings.audit, egress_network=settings.egress_network)  # fmt: skip


def with_tool_cache(agent: DurableAgent, cache: ToolCache) -> DurableAgent:
    """Back the agent's `cache` decorators with `cache`."""
    return replace(agent, cache=cache)


def with_deployment_runner(agent: DurableAgent, runner: Runner) -> DurableAgent:
    """Run every RunIsolated call of the agent through `runner`."""
    return replace(agent, deployment_runner=runner)
