"""Sessions the store tests write: long ones, with settled history and open calls."""

from __future__ import annotations

from runner.session import Session, ToolResult, TrackedCall
from runner.state import LlmTurn, PartialUserTurn, ToolCall, ToolResultEntry, UserTurn, new_token


def long_session(pairs: int) -> Session:
    """A prompt, `pairs` settled (LLM call + results) pairs, then a partial user turn whose
    first call has finished and whose second is deferred."""
    session = Session.start("a", "h1", "hi")

    def call(call_id: str, turn: int, state: str, result: ToolResult | None) -> TrackedCall:
        return TrackedCall(id=call_id, token=new_token(), tool="echo", arguments={"n": turn},
                           state=state, disposition={"tag": "runSync"}, turn=turn,
                           idempotency_key=f"{session.id}/{call_id}", result=result)  # fmt: skip

    for n in range(pairs):
        turn = len(session.turns)
        session.turns.append(LlmTurn(tool_calls=[ToolCall(id=f"e{n}", name="echo",
                                                          arguments={"n": turn})]))  # fmt: skip
        session.calls[f"e{n}"] = call(f"e{n}", turn, "completed", ToolResult.ok(n))
        entry = ToolResultEntry(tool_call_id=f"e{n}", tool="echo", result=ToolResult.ok(n))
        session.turns.append(UserTurn(tool_results=[entry]))
    turn = len(session.turns)
    requested = [ToolCall(id=i, name="echo", arguments={}) for i in ("done", "wait")]
    session.turns.append(LlmTurn(tool_calls=requested))
    session.calls["done"] = call("done", turn, "completed", ToolResult.ok("d"))
    session.calls["wait"] = call("wait", turn, "deferred", None)
    session.turns.append(PartialUserTurn(call_ids=["done", "wait"]))
    return session
