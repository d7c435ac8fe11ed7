"""What the engine runs with, gathered once per operation: the agent, its store (as
Storage), the LLM, the policy, the tools, the runners and the clock.

`DurableAgent` (scheduler.py) builds one for each public call, the Engine (engine.py)
one for each operation once the session's lease and load name its agent; the gate, the
stepper and the operator commands all take it, through an `Opener` (below).
`settle_and_commit` is the one place that folds a finished turn, sets the status from
the calls, and commits under the lease's fence.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from runner.isolation import Runner
from runner.isolation.audit import AuditedRunner, AuditSink
from runner.llm import LLM
from runner.session.agent import Agent
from runner.session.leases import Holder
from runner.session.output import CallOutputBus
from runner.session.policy import DockerSpec, LocalProcessSpec, Policy
from runner.session.prompt import Conversations
from runner.session.secrets import Keyring
from runner.session.storage import Storage
from runner.state import Clock, SessionTail
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
    call_output: CallOutputBus = field(default_factory=CallOutputBus)
    #: Where a definition with secret values is remembered (runner.session.secrets).
    keyring: Keyring = field(default_factory=Keyring)

    def audited(self, runner: Runner) -> Runner:
        """`runner` writing an audit record of each call (it stays the caller's to close)."""
        if self.audit is None:
            return runner
        return AuditedRunner(runner, self.audit, fail_closed=self.audit_fail_closed)

    async def commit(self, session: SessionTail, holder: Holder, *, release: bool = False) -> None:
        """Save under the lease's fence; the session takes the new version. `release`:
        this is the operation's last commit, which lets the lease go in the same store
        call (save_and_release; nothing may be done under the lease after it)."""
        storage = self.storage
        if storage.durable is not None and release and holder.lease is not None:
            await holder.finishing()
            stored = await storage.run(storage.durable.save_and_release, session, holder.lease)
            holder.released = True
        elif storage.durable is not None:
            stored = await storage.run(storage.durable.save, session, holder.fences)
        else:
            stored = await storage.run(storage.store.save, session)
        session.version, session.updated_ms = stored.version, stored.updated_ms

    async def settle_and_commit(
        self, session: SessionTail, holder: Holder, *, release: bool = False
    ) -> None:
        settle(session)
        await self.commit(session, holder, release=release)


#: What an operation runs in once the gate let it in: its Runtime, the session (loaded
#: once, under the lease) and the holder whose fence every commit carries.
Opened = tuple[Runtime, SessionTail, Holder]
#: Opens the gate for one session, each time it is entered (`complete_calls` re-enters it after a
#: lost race): DurableAgent's and the Engine's differ only in how they find the agent.
Opener = Callable[[], AbstractAsyncContextManager[Opened]]
