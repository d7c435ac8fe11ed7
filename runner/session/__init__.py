"""The durable session engine: agents, policies, and the step/resume/complete scheduler.

    from runner.session import load_agent, with_durable_workflows
    from runner.stores import SQLiteStore

    agent = with_durable_workflows(load_agent("examples/agents/demo.json"), SQLiteStore("s.db"))
    report = anyio.run(agent.run, "What do we know?")

agent.py: the agent file; policy.py: dispositions and the policy; engine.py: the Engine
every front door calls, for the sessions of any stored agent; scheduler.py: the public
DurableAgent (one agent); operations.py: what each operation does once the gate opened,
for both; gate.py: the lease/version/poison/expiry gate; stepper.py: steps;
commands.py: complete_calls and the operator's commands; execute.py: how one call runs;
output.py: what an isolated call's worker streams, kept with the call and published live;
storage.py: store calls off the event loop and the capability checks; audit.py: where
each isolated call's audit record goes (AGENTS_RUNNER_AUDIT); stored.py: the
DurableAgent of each stored agent, kept for a long-running process; leases.py: holding
and renewing a lease; worker.py: the session worker (`Worker`), advancing due sessions
under leases until it drains; operator.py: what an operator is shown. Session values and their
state tables live in runner.state; the engine sees isolation only through the Runner
protocol and the store only through its interfaces.
"""

from runner.session.agent import Agent, AgentError, ToolSpec, load_agent, parse_agent
from runner.session.engine import Engine, Listed, Pending, Shown
from runner.session.execute import from_envelope, from_output, runner_for_spec
from runner.session.gate import SessionError, UnknownToken
from runner.session.leases import LeaseBusy
from runner.session.policy import (
    Cache,
    Decorate,
    Defer,
    DockerSpec,
    Label,
    LocalProcessSpec,
    Policy,
    PolicyConfig,
    PolicyContext,
    Retries,
    RunAsync,
    RunIsolated,
    RunSync,
    Timeout,
    Truncate,
)
from runner.session.reports import CompletionReport, StepReport, pending_entry, waiting_reason
from runner.session.scheduler import (
    DurableAgent,
    default_owner,
    with_deployment_runner,
    with_durable_workflows,
    with_tool_cache,
)
from runner.session.settings import AgentSettings
from runner.session.storage import StoreCapabilityError, require_durable
from runner.session.stored import StoredAgents
from runner.session.worker import SessionWorkerOptions, Worker
from runner.state import (
    SESSION_SCHEMA_VERSION,
    LlmTurn,
    PartialUserTurn,
    Session,
    SessionTail,
    ToolCall,
    ToolResult,
    TrackedCall,
    UserTurn,
)

__all__ = [
    "SESSION_SCHEMA_VERSION",
    "Agent",
    "AgentError",
    "AgentSettings",
    "Cache",
    "CompletionReport",
    "Decorate",
    "Defer",
    "DockerSpec",
    "DurableAgent",
    "Engine",
    "Label",
    "LeaseBusy",
    "Listed",
    "LlmTurn",
    "LocalProcessSpec",
    "PartialUserTurn",
    "Pending",
    "Policy",
    "PolicyConfig",
    "PolicyContext",
    "Retries",
    "RunAsync",
    "RunIsolated",
    "RunSync",
    "Session",
    "SessionError",
    "SessionTail",
    "SessionWorkerOptions",
    "Shown",
    "StepReport",
    "StoreCapabilityError",
    "StoredAgents",
    "Timeout",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "TrackedCall",
    "Truncate",
    "UnknownToken",
    "UserTurn",
    "Worker",
    "default_owner",
    "from_envelope",
    "from_output",
    "load_agent",
    "parse_agent",
    "pending_entry",
    "require_durable",
    "runner_for_spec",
    "waiting_reason",
    "with_deployment_runner",
    "with_durable_workflows",
    "with_tool_cache",
]
