"""Sessions round-trip exactly through their JSON document; a tail is not a session."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from runner.session import LlmTurn, PartialUserTurn, Session, ToolCall, ToolResult, TrackedCall
from runner.state import (
    HistoryNotLoaded,
    SessionTail,
    ToolResultEntry,
    UserTurn,
    new_token,
    tail_from,
)


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


def test_a_whole_session_begins_at_the_first_turn_and_a_tail_becomes_one_only_whole():
    session = full_session()
    with pytest.raises(ValidationError, match="first_turn"):
        Session.model_validate({**session.model_dump(), "first_turn": 2})
    tail = tail_from(session, 3, turns=session.turns[3:])
    assert type(tail) is SessionTail and tail.turn_count == session.turn_count
    with pytest.raises(HistoryNotLoaded, match="only the turns from 3 on"):
        tail.require_history("the LLM's next request")
    whole = Session.joined(tail, session.turns, session.calls)
    assert type(whole) is Session and whole == session
    assert whole.require_history("a view") is whole
    # A part that begins at turn 0 is whole: it comes out as a Session.
    assert type(tail_from(session, 0)) is Session and tail_from(session, 0) == session
