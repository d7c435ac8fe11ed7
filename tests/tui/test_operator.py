"""The operator's actions on the selected session: each says what it will do and asks
first (y does it, n leaves it); refusals and errors are shown, never a traceback."""

from __future__ import annotations

import pytest

from runner.state import now_ms
from runner.state.transitions import move_call, set_status
from runner.tui import ConsoleApp, StoreSource
from tests.tui.conftest import SIZE, screen_of, settle, waiting_session

pytestmark = pytest.mark.anyio


def question(app: ConsoleApp) -> str:
    return str(app.screen.query_one("#confirm-what").render())


async def test_cancel_asks_first_and_n_leaves_the_session_as_it_is(store):
    sid = await waiting_session(store)
    app = ConsoleApp(StoreSource(store), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        await pilot.press("ctrl+s")
        assert question(app) == (f"Cancel session {sid} and its 2 open calls (session cancel)."
                                 " Nothing advances it afterwards.")  # fmt: skip
        await pilot.press("n")
        await settle(pilot)
        assert screen.status_text == "Cancel: left as it is"
        assert store.load(sid).status == "waiting"
        await pilot.press("ctrl+s", "y")
        await settle(pilot)
        assert screen.status_text == f"session {sid} is cancelled"
        assert screen.pending_rows == []
        await pilot.press("ctrl+s")  # nothing left to cancel: said, not asked
        assert screen.status_text == f"error: session {sid} is cancelled: nothing to cancel"
    assert {c.state for c in store.load(sid).calls.values()} >= {"cancelled"}


async def test_resume_continues_a_frozen_session(store):
    sid = await waiting_session(store)
    session = store.load(sid)
    set_status(session, "frozen")
    store.save(session)
    app = ConsoleApp(StoreSource(store), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        assert screen.rows[sid].status == "frozen"
        await pilot.press("ctrl+r")
        assert question(app) == (f"Step session {sid} (frozen) here until its final answer or"
                                 " its next wait (session resume).")  # fmt: skip
        await pilot.press("y")
        await settle(pilot)
        assert screen.status_text == f"session {sid} is waiting on 2 calls"
    assert store.load(sid).status == "waiting"


async def test_retry_of_an_unknown_outcome_call_asks_as_the_cli_does(store):
    sid = await waiting_session(store)
    session = store.load(sid)
    move_call(session.call("call_remote_a"), "unknown_outcome", now_ms())
    store.save(session)
    app = ConsoleApp(StoreSource(store), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        assert "unknown_outcome" in screen.rows[sid].conditions
        await pilot.press("ctrl+o", "ctrl+t")  # remote_b is selected: the unknown one is asked
        assert question(app) == (
            "Call call_remote_a (fetch_remote_a) may already have had its external effects."
            " Run it again anyway (session retry --force)? Or leave it and settle it by"
            " answering or failing it."
        )
        await pilot.press("y")
        await settle(pilot)
        assert screen.status_text.startswith("call call_remote_a will run again")
        assert [r.state for r in screen.pending_rows] == ["deferred", "deferred"]
        await pilot.press("ctrl+t")
        assert screen.status_text == "error: no call of unknown outcome in this session to retry"
    assert store.load(sid).call("call_remote_a").state == "deferred"


async def test_unquarantine_says_why_it_was_quarantined_and_lets_it_run(store):
    sid = await waiting_session(store)
    session = store.load(sid)
    set_status(session, "quarantined")
    session.quarantine_reason = "3 holders died advancing it"
    store.save(session)
    app = ConsoleApp(StoreSource(store), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        await pilot.press("ctrl+r")  # resume alone does not: it says what does
        refused = f"error: session {sid} is quarantined: Ctrl+P lets it run again"
        assert screen.status_text == refused
        await pilot.press("ctrl+p")
        assert "it was quarantined: 3 holders died advancing it" in question(app)
        await pilot.press("y")
        await settle(pilot)
        assert screen.status_text == f"session {sid} is waiting on 2 calls", screen.status_text
    assert store.load(sid).status == "waiting"


async def test_a_store_error_is_shown_not_raised(store):
    await waiting_session(store)
    app = ConsoleApp(StoreSource(store), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        store.close()  # every read and write now fails in the store
        await pilot.press("ctrl+s", "y")
        await settle(pilot)
        assert screen.status_text.startswith("error: "), screen.status_text
        assert "Cannot operate on a closed database" in screen.status_text
        assert app.is_running
