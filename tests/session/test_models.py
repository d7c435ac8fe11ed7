"""Sessions round-trip exactly through their JSON document."""

from __future__ import annotations

import json

from runner.session import LlmTurn, PartialUserTurn, Session, ToolCall, ToolResult, TrackedCall
from runner.state import ToolResultEntry, UserTurn, new_token


def full_session() -> Session:
    session = Session.start("demo", "h" * 64, "hello ünïcode")
    session.turns += [
        LlmTurn(text="hm", tool_calls=[ToolCall(id="a", name="t", arguments={"x": [1, 2.5]})]),
        UserTurn(tool_results=[ToolResultEntry(tool_call_id="a", tool="t",
                                               result=ToolResult.ok({"k": None}))]),
        LlmTurn(tool_calls=[ToolCall(id="b", name="t", arguments={})]),
        PartialUserTurn(call_ids=["b"]),
    ]  # fmt: skip
    session.calls["b"] = TrackedCall(
        id="b", token=new_token(), tool="t", arguments={}, state="deferred",
        disposition={"tag": "defer", "reason": "later"}, turn=3, idempotency_key="s/b",
        defer_reason="later",
    )  # fmt: skip
    return session


def test_session_json_round_trips_exactly():
    session = full_session()
    text = session.to_json()
    again = Session.from_json(text)
    assert again == session
    assert again.to_json() == text
    assert [type(t) for t in again.turns] == [type(t) for t in session.turns]


def test_tokens_are_uuids_and_unique():
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100 and all(len(t) == 36 for t in tokens)


def test_result_text_is_what_the_model_sees():
    assert ToolResult.ok("plain").text() == "plain"
    assert json.loads(ToolResult.ok({"a": 1}).text()) == {"a": 1}
    assert (
        ToolResult.error("WORKER_OOM", "out of memory").text() == "[error WORKER_OOM] out of memory"
    )
