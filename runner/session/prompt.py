"""The conversation as the LLM sees it: the system prompt, every turn, the tools."""

from __future__ import annotations

from runner.llm import LLMRequest, Message, RequestedCall, ToolDefinition
from runner.session.agent import Agent
from runner.state import LlmTurn, Session, UserTurn


def llm_request(agent: Agent, session: Session) -> LLMRequest:
    session.require_history("the LLM's next request")
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
    tools = tuple(ToolDefinition(t.name, t.description, t.parameters) for t in agent.tools)
    return LLMRequest(agent.system_prompt, tuple(messages), tools)
