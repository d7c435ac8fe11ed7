"""What the engine runs with, gathered once per operation: the agent, its store (as
Storage), the LLM, the policy, the tools, the runners and the clock.

`DurableAgent` (scheduler.py) builds one for each public call; the gate, the stepper and
the operator commands all take it. `settle_and_commit` is the one place that folds a
finished turn, sets the status from the calls, and commits under the lease's fence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runner.isolation import Runner
from runner.isolation.audit import AuditedRunner, AuditSink
from runner.llm import LLM
from runner.session.agent import Agent
from runner.session.leases import Holder
from runner.session.output import CALL_OUTPUT, CallOutputBus
from runner.session.policy import DockerSpec, LocalProcessSpec, Policy
from runner.session.prompt import Conversations
from runner.session.storage import Storage
from runner.state import Clock, Session
from runner.state.transitions import settle
from runner.stores import ToolCache
from runner.tools import ToolRegistry

RunnerFactory = Callable[[DockerSpec | LocalProcessSpec], Runner]


@dataclass(frozen=True)
class Runtime:
    agent: Agent
    storage: Storage
    llm: LLM
    policy: Policy
    tools: ToolRegistry
    clock: Clock
    runner_factory: RunnerFactory
    #: The messages already sent, per session (kept by the DurableAgent across operations).
    conversations: Conversations
    deployment_runner: Runner | None = None
    cache: ToolCache | None = None
    #: Where each isolated call's audit record goes (None: not audited), and whether a
    #: record that cannot be written fails the call (runner.session.audit).
    audit: AuditSink | None = None
    audit_fail_closed: bool = False
    #: Where the events isolated calls stream are published live (runner.session.output).
    call_output: CallOutputBus = CALL_OUTPUT

    def audited(self, runner: Runner) -> Runner:
        """`runner` writing an audit record of each call (it stays the caller's to close)."""
        if self.audit is None:
            return runner
        return AuditedRunner(runner, self.audit, fail_closed=self.audit_fail_closed)

    async def commit(self, session: Session, holder: Holder) -> None:
        """Save under the lease's fence; the session takes the new version."""
        storage = self.storage
        if storage.durable is not None:
            stored = await storage.run(storage.durable.save, session, holder.fences)
        else:
            stored = await storage.run(storage.store.save, session)
        session.version, session.updated_ms = stored.version, stored.updated_ms

    async def settle_and_commit(self, session: Session, holder: Holder) -> None:
        settle(session)
        await self.commit(session, holder)
