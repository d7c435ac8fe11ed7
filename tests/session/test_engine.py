"""The Engine on a real SQLite store whose method calls are counted (StoreCalls): a
continuation by token reads its session at most twice (in fact once: the token's lookup,
the lease and the one load under it are one store call) and costs two store round trips
in all, the resume after it four, and every operation finds the session's agent in the
store, keeping at most `agents_kept` of them."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from runner.session import Engine, Session, UnknownToken, parse_agent
from runner.session.storage import StoreCalls
from runner.state import ToolResult
from runner.stores import SQLiteStore
from tests.session.conftest import agent_doc, calls

DEFER = {"default": {"tag": "defer", "reason": "outside"}}
#: The calls that read a session: the token's lookup and loads.
READS = ("find", "load", "with_history")


def waiting_agent(answer: str = "done: {{result:a}}"):
    document = agent_doc([calls(("a", "later")), {"text": answer}], ["later"], DEFER)
    return parse_agent(document)


def reads(counts: Counter[str]) -> int:
    return sum(counts[name] for name in READS)


def test_a_continuation_by_token_reads_its_session_at_most_twice(tmp_path):
    store = SQLiteStore(tmp_path / "state.db")
    engine = Engine(store)

    async def main() -> None:
        session = await engine.start(waiting_agent(), "go")
        waiting = await engine.resume(session.id)
        assert waiting.status == "waiting"
        token = waiting.session.calls["a"].token
        counted = StoreCalls(store)
        try:
            report = await engine.complete(token, ToolResult(status="ok", content="42"))
            assert report.applied == (token,) and report.session.status == "running"
            continuation = Counter(counted.counts)
            counted.reset()
            resumed = await engine.resume(session.id)
            assert resumed.status == "completed" and resumed.session.final_answer == "done: 42"
            resume = Counter(counted.counts)
        finally:
            counted.stop()
        # find + the load under the lease (before the Engine: find + 3 loads by the server),
        # now one call with the lease, and the commit that releases it.
        assert reads(continuation) <= 2, continuation
        assert continuation == {"lease_and_load_token": 1, "save_and_release": 1}, continuation
        # the lease with the load, the model call's attempt, the answer, the release
        assert resume == {"lease_and_load": 1, "save": 2, "release_lease": 1}, resume
        print(f"continuation: {sum(continuation.values())} store calls {dict(continuation)};"
              f" resume: {sum(resume.values())} {dict(resume)}")  # fmt: skip

    anyio.run(main)
    store.close()


def test_an_unknown_token_is_refused_after_one_lookup_taking_no_lease(tmp_path):
    store = SQLiteStore(tmp_path / "state.db")
    engine = Engine(store)
    counted = StoreCalls(store)
    with pytest.raises(UnknownToken):
        anyio.run(engine.complete, "no-such-token", ToolResult(status="ok", content="x"))
    assert dict(counted.counts) == {"lease_and_load_token": 1}
    counted.stop()
    assert store.db.execute("SELECT count(*) FROM leases").fetchone() == (0,)
    store.close()


@pytest.mark.parametrize(("kept", "read_again"), [(1, 2), (2, 0)])
def test_the_engine_runs_each_stored_agent_keeping_a_bounded_few(tmp_path, kept, read_again):
    store = SQLiteStore(tmp_path / "state.db")
    engine = Engine(store, agents_kept=kept)

    async def main() -> None:
        first = await engine.start(waiting_agent("first {{result:a}}"), "go")
        second = await engine.start(waiting_agent("second {{result:a}}"), "go")
        for session in (first, second):  # two agents
            waiting = await engine.resume(session.id)
            token = waiting.session.calls["a"].token
            await engine.complete(token, ToolResult(status="ok", content="1"))
        assert engine.agents_kept == kept
        counted = StoreCalls(store)
        try:
            answers = [(await engine.resume(s.id)).session.final_answer for s in (first, second)]
        finally:
            counted.stop()
        assert answers == ["first 1", "second 1"]  # each session with its own agent
        # With one kept, each pushes the other out: both are read from the store again.
        assert counted.counts["agent_document"] == read_again

    anyio.run(main)
    store.close()


def test_the_reads_an_operator_makes_go_through_the_engine(tmp_path):
    """pending (the tail), show (the whole session, its lease, late results), list (with
    conditions, filtered by one) and holder: what the CLI and the server print."""
    store = SQLiteStore(tmp_path / "state.db")
    engine = Engine(store)

    async def main() -> None:
        waiting = (await engine.resume((await engine.start(waiting_agent(), "go")).id)).session
        done = await engine.start(waiting_agent(), "other")
        await engine.cancel(done.id)
        pending = await engine.pending(waiting.id)
        assert [c.id for c in pending.session.open_calls()] == ["a"]
        assert pending.overdue == frozenset() and pending.now_ms > 0
        shown = await engine.show(waiting.id)
        assert type(shown.session) is Session and shown.session.turn_count == 3
        assert shown.lease is not None and not shown.lease.owner  # released
        assert shown.late == [] and shown.document()["conditions"] == ["waiting"]
        assert "waits for `session complete" in shown.why()
        listed = {row.summary.id: row.conditions for row in await engine.list()}
        assert listed == {waiting.id: ["waiting"], done.id: ["cancelled"]}
        assert [row.summary.id for row in await engine.list("cancelled")] == [done.id]
        with pytest.raises(ValueError, match="condition: expected one of"):
            await engine.list("nonsense")
        assert await engine.holder(waiting.id) is None
        lease = await anyio.to_thread.run_sync(store.acquire_lease, waiting.id, "them", 30)
        assert lease is not None and await engine.holder(waiting.id) == "them"

    anyio.run(main)
    store.close()
