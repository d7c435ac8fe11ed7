"""The conversation as the LLM sees it: the system prompt, every turn (a prompt with its
attachments as image or text parts), the tools."""

from __future__ import annotations

from runner.llm import (
    ContentPart,
    ImagePart,
    LLMRequest,
    Message,
    RequestedCall,
    TextPart,
    ToolDefinition,
)
from runner.session.agent import Agent
from runner.session.policy import Defer, unwrap
from runner.state import Attachment, LlmTurn, Session, UserTurn


def llm_request(agent: Agent, session: Session) -> LLMRequest:
    session.require_history("the LLM's next request")
    messages: list[Message] = []
    for turn in session.turns:
        if isinstance(turn, UserTurn):
            if turn.text is not None:
                parts = tuple(content_part(a) for a in turn.attachments)
                messages.append(Message("user", turn.text, parts=parts))
            messages.extend(
                Message("tool", e.result.text(), tool_call_id=e.tool_call_id)
                for e in turn.tool_results
            )
        elif isinstance(turn, LlmTurn):
            calls = tuple(RequestedCall(c.id, c.name, c.arguments) for c in turn.tool_calls)
            messages.append(Message("assistant", turn.text, calls))
    return LLMRequest(agent.system_prompt, tuple(messages), tool_definitions(agent))


def content_part(attachment: Attachment) -> ContentPart:
    """An attachment as the model sees it: an image part, or its text under its name."""
    if attachment.kind == "image":
        return ImagePart(attachment.mime_type, attachment.data)
    return TextPart(f"Attached file {attachment.name}:\n{attachment.data}")


#: The arguments of a tool the policy names but the file does not declare: any object.
UNDECLARED_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": True}


def tool_definitions(agent: Agent) -> tuple[ToolDefinition, ...]:
    """The declared tools, then each tool a policy rule names that `tools` does not
    declare (agents-exe files name their tools only there): any object as arguments,
    and the rule's defer reason, if any, as its description."""
    tools = [ToolDefinition(t.name, t.description, t.parameters) for t in agent.tools]
    for rule in agent.policy.rules:
        name = rule.match.tool
        if agent.tool(name) is None and all(t.name != name for t in tools):
            _, base = unwrap(rule.disposition)
            why = f" ({base.reason})" if isinstance(base, Defer) else ""
            description = f"The {name} tool{why}."
            tools.append(ToolDefinition(name, description, dict(UNDECLARED_PARAMETERS)))
    return tuple(tools)
