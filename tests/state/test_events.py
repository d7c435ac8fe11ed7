"""derive_events: the events of one write, from what was stored before it; and
docs/events.md names every kind there is."""

from __future__ import annotations

from pathlib import Path

from runner.state import Session, ToolResult, TrackedCall, new_token
from runner.state.events import EVENT_KINDS, derive_events

DOC = (Path(__file__).resolve().parents[2] / "docs" / "events.md").read_text()


def tracked(call_id: str, state: str, result: ToolResult | None = None) -> TrackedCall:
    return TrackedCall(id=call_id, token=new_token(), tool="t", arguments={}, state=state,
                       disposition={"tag": "defer"}, turn=1, idempotency_key=call_id,
                       result=result)  # fmt: skip


def test_only_changes_make_events_calls_first_then_the_status():
    session = Session.start("a", "h", "hi")
    session.status = "waiting"
    calls = [tracked("new", "deferred"), tracked("same", "deferred"),
             tracked("ran", "running"), tracked("done", "completed", ToolResult.ok(1)),
             tracked("gone", "expired", ToolResult(status="expired", content="late")),
             tracked("odd", "unknown_outcome")]  # fmt: skip
    before = {"same": "deferred", "ran": "ready", "done": "running", "gone": "deferred",
              "odd": "running"}  # fmt: skip
    events = derive_events(session, calls, "running", before)
    assert [(e.kind, e.call_id) for e in events] == [
        ("call.deferred", "new"), ("call.completed", "done"), ("call.failed", "gone"),
        ("call.unknown_outcome", "odd"), ("session.waiting", None)]  # fmt: skip
    new, done, gone, odd, waiting = events
    assert new.data["previous_state"] is None and new.data["continuation_token"]
    assert "result" not in new.data and "continuation_token" not in done.data
    assert done.data["result"] == {"status": "ok", "content": 1, "error_code": None,
                                   "retryable": False}  # fmt: skip
    assert gone.data["state"] == "expired" and gone.data["result"]["status"] == "expired"
    assert odd.data["continuation_token"] == calls[5].token
    assert waiting.data == {"session_id": session.id, "status": "waiting",
                            "previous_status": "running", "agent_slug": "a"}  # fmt: skip
    assert derive_events(session, calls, "waiting", {c.id: c.state for c in calls}) == []


def test_a_new_session_is_created_whatever_its_status():
    session = Session.start("a", "h", "hi")
    session.status, session.failure_reason = "failed", "the model is gone"
    assert [e.kind for e in derive_events(session, [], None, {})] == ["session.created"]
    session.status = "completed"
    session.final_answer = "42"
    [done] = derive_events(session, [], "running", {})
    assert (done.kind, done.data["final_answer"]) == ("session.completed", "42")


def test_the_docs_list_every_kind():
    for kind in EVENT_KINDS:
        assert f"| `{kind}` |" in DOC, kind
