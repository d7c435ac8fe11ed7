"""The event log on every durable engine: the events a real session's writes make, in
commit order; resuming after a seq; nothing from a refused write; and on PostgreSQL,
readers that tail the log while several writers commit never miss a seq."""

from __future__ import annotations

import threading

import anyio
import pytest

from runner.session import ToolResult, parse_agent, with_durable_workflows
from runner.state import Session
from runner.stores import (
    CompositeStore,
    DurableStore,
    Event,
    FileSessionStore,
    VersionConflict,
)
from tests.conftest import StoreLocations

#: A builtin call that runs at once, then a deferred one, then the final answer.
AGENT = {
    "slug": "events",
    "provider": {"tag": "scripted", "responses": [
        {"tool_calls": [{"id": "c_echo", "name": "echo", "arguments": {"text": "hi"}}]},
        {"tool_calls": [{"id": "c_later", "name": "later", "arguments": {}}]},
        {"text": "done: {{result:c_later}}"}]},
    "executionMode": "asynchronous",
    "tools": [{"name": "echo", "kind": "builtin"}, {"name": "later", "kind": "external"}],
    "toolCallPolicyConfig": {"default": {"tag": "runSync"}, "rules": [
        {"match": {"tool": "later"}, "disposition": {"tag": "defer", "reason": "outside"}}]},
}  # fmt: skip


def drive(store: DurableStore) -> str:
    """The agent through a builtin call, a deferral, its completion and the final answer."""
    agent = with_durable_workflows(parse_agent(AGENT), store)

    async def story() -> str:
        report = await agent.run("go")
        assert report.session.status == "waiting"
        token = report.session.calls["c_later"].token
        completed = await agent.complete_calls(
            report.session.id, [(token, ToolResult.ok("late news"))]
        )
        assert completed.session.status == "running"
        final = await agent.resume(report.session.id)
        assert final.session.status == "completed"
        return final.session.id

    return anyio.run(story)


def kinds(events: list[Event]) -> list[tuple[str, str | None]]:
    return [(e.kind, e.call_id) for e in events]


def test_a_sessions_story_is_its_events_in_order(durable_store: DurableStore):
    session_id = drive(durable_store)
    events = durable_store.events(0)
    assert kinds(events) == [
        ("session.created", None),
        ("call.completed", "c_echo"),
        ("call.deferred", "c_later"),
        ("session.waiting", None),
        ("call.completed", "c_later"),
        ("session.running", None),
        ("session.completed", None),
    ]
    assert [e.seq for e in events] == list(range(1, 8))
    assert {e.session_id for e in events} == {session_id}
    assert durable_store.last_event_seq() == 7
    created, echoed, deferred, waiting, completed, running, done = events
    assert created.data == {"session_id": session_id, "status": "running",
                            "previous_status": None, "agent_slug": "events"}  # fmt: skip
    assert echoed.data["tool"] == "echo" and echoed.data["result"]["status"] == "ok"
    token = durable_store.load(session_id).calls["c_later"].token
    assert deferred.data == {"session_id": session_id, "call_id": "c_later", "tool": "later",
                             "state": "deferred", "previous_state": None, "turn": 3,
                             "continuation_token": token, "reason": "outside",
                             "expires_ms": None}  # fmt: skip
    assert waiting.data["previous_status"] == "running"
    assert completed.data["previous_state"] == "deferred"
    assert completed.data["result"] == {"status": "ok", "content": "late news",
                                        "error_code": None, "retryable": False}  # fmt: skip
    assert running.data["status"] == "running"
    assert done.data["final_answer"] == "done: late news"
    assert all(e.at_ms > 0 for e in events)


def test_events_resume_exactly_after_a_seq(durable_store: DurableStore):
    session_id = drive(durable_store)
    other = drive(durable_store)
    everything = durable_store.events(0)
    assert len(everything) == 14
    for after in (0, 1, 6, 7, 13, 14):
        assert durable_store.events(after) == everything[after:]
    assert durable_store.events(3, limit=2) == everything[3:5]
    mine = durable_store.events(0, session_id=session_id)
    assert mine == [e for e in everything if e.session_id == session_id]
    assert durable_store.events(mine[2].seq, session_id=other) == [
        e for e in everything if e.session_id == other and e.seq > mine[2].seq
    ]
    assert durable_store.events(0, session_id="s-none") == []


def test_a_refused_write_writes_no_events(durable_store: DurableStore):
    session = Session.start("events", "h", "hi")
    durable_store.create(session, {"slug": "events"})
    stale = durable_store.load(session.id)
    fresh = durable_store.load(session.id)
    fresh.status = "waiting"
    durable_store.save(fresh)
    assert kinds(durable_store.events(0)) == [("session.created", None),
                                              ("session.waiting", None)]  # fmt: skip
    stale.status = "frozen"
    with pytest.raises(VersionConflict):
        durable_store.save(stale)
    assert len(durable_store.events(0)) == 2
    # A save that changes no state or status makes no event either.
    again = durable_store.load(session.id)
    again.llm_attempts = 1
    durable_store.save(again)
    assert len(durable_store.events(0)) == 2


def test_wait_for_events_wakes_on_this_stores_writes(durable_store: DurableStore):
    session = Session.start("events", "h", "hi")
    durable_store.wait_for_events(0.01)  # starts listening where a store listens
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(durable_store.wait_for_events(30)))
    waiter.start()
    durable_store.create(session, {"slug": "events"})
    waiter.join(60)
    assert woke == [True]


def test_a_composite_store_keeps_the_log_of_its_primary(durable_store: DurableStore, tmp_path):
    files = FileSessionStore(tmp_path / "files")
    old = Session.start("events", "h", "hi")
    files.create(old, {"slug": "events"})
    composite = CompositeStore(durable_store, files)
    assert isinstance(composite, DurableStore)
    moved = composite.load(old.id)
    moved.status = "waiting"
    composite.save(moved)  # adopted into the primary (created there), then saved
    assert kinds(composite.events(0)) == [("session.created", None),
                                          ("session.waiting", None)]  # fmt: skip
    assert composite.events(0) == durable_store.events(0)
    assert composite.last_event_seq() == 2


def test_readers_resuming_after_a_seq_never_miss_one(store_locations: StoreLocations):
    """Writers on their own store instances commit concurrently while a reader tails
    the log with `events(after=last seen)`: it sees every seq, each once, in order. (With
    a plain sequence, a seq committed after a bigger one would be passed over.)"""
    writers, saves = 4, 40
    stores = [store_locations.open() for _ in range(writers)]
    reader = store_locations.open()
    sessions = []
    for n, store in enumerate(stores):
        session = Session.start("events", "h", f"writer {n}")
        sessions.append(store.create(session, {"slug": "events"}))
    done = threading.Event()
    failures: list[BaseException] = []

    def write(store: DurableStore, session: Session) -> None:
        try:
            for n in range(saves):
                session.status = "waiting" if n % 2 == 0 else "running"
                session = store.save(session)
        except BaseException as exc:
            failures.append(exc)

    seen: list[int] = []

    def tail() -> None:
        while True:
            finished = done.is_set()  # read once more after the writers are done
            page = reader.events(seen[-1] if seen else 0)
            seen.extend(e.seq for e in page)
            if finished and not page:
                return

    threads = [
        threading.Thread(target=write, args=pair) for pair in zip(stores, sessions, strict=True)
    ]
    tailer = threading.Thread(target=tail)
    tailer.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    done.set()
    tailer.join(120)
    assert failures == []
    total = writers * (saves + 1)
    assert seen == list(range(1, total + 1))
    assert reader.last_event_seq() == total
