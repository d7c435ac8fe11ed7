"""The durable session engine: agents, policies, and the step/resume/wake scheduler.

    from runner.session import load_agent, with_durable_workflows
    from runner.stores import SQLiteStore

    agent = with_durable_workflows(load_agent("examples/agents/demo.json"), SQLiteStore("s.db"))
    report = anyio.run(agent.run, "What do we know?")

models.py holds what is stored, agent.py the agent file, policy.py the dispositions and
the policy, execute.py how one call runs, scheduler.py the steps. The engine sees
isolation only through the Runner protocol and the store only through its interfaces.
"""

from runner.session.agent import Agent, AgentError, ToolSpec, load_agent, parse_agent
from runner.session.models import (
    SESSION_SCHEMA_VERSION,
    LlmTurn,
    PartialUserTurn,
    Session,
    ToolCall,
    ToolResult,
    TrackedCall,
    UserTurn,
)
from runner.session.policy import (
    Cache,
    Decorate,
    Defer,
    DockerSpec,
    Label,
    LocalProcessSpec,
    PolicyConfig,
    PolicyContext,
    Retries,
    RunAsync,
    RunIsolated,
    RunSync,
    Timeout,
    Truncate,
)
from runner.session.scheduler import (
    DurableAgent,
    SessionError,
    StepReport,
    UnknownToken,
    WakeReport,
    with_deployment_runner,
    with_durable_workflows,
    with_tool_cache,
)

__all__ = [
    "SESSION_SCHEMA_VERSION",
    "Agent",
    "AgentError",
    "Cache",
    "Decorate",
    "Defer",
    "DockerSpec",
    "DurableAgent",
    "Label",
    "LlmTurn",
    "LocalProcessSpec",
    "PartialUserTurn",
    "PolicyConfig",
    "PolicyContext",
    "Retries",
    "RunAsync",
    "RunIsolated",
    "RunSync",
    "Session",
    "SessionError",
    "StepReport",
    "Timeout",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "TrackedCall",
    "Truncate",
    "UnknownToken",
    "UserTurn",
    "WakeReport",
    "load_agent",
    "parse_agent",
    "with_deployment_runner",
    "with_durable_workflows",
    "with_tool_cache",
]
