"""Answering the calls a session waits on through the keys, as agents-exe's TUI does:
Ctrl+O selects, Ctrl+N enters answer mode, Enter sends with autoResume; Ctrl+B fails."""

from __future__ import annotations

import sys

import anyio
import pytest

from runner.tui import ConsoleApp, StoreSource
from tests.tui.conftest import SIZE, screen_of, settle, waiting_session

pytestmark = pytest.mark.anyio
CLI = [sys.executable, "-m", "runner.cli"]


async def test_answer_both_calls_through_the_keys_resumes_to_the_final_answer(store):
    sid = await waiting_session(store)
    app = ConsoleApp(StoreSource(store))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        assert screen.session_id == sid
        assert [r.tool for r in screen.pending_rows] == ["fetch_remote_a", "fetch_remote_b"]
        await pilot.press("ctrl+n")
        assert screen.answering is not None and screen.answering.call_id == "call_remote_a"
        assert "Answering call_remote_a" in str(screen.query_one("#editor-label").render())
        await pilot.press(*'{"orders": 12}', "enter")
        await settle(pilot)
        assert screen.answering is None, screen.status_text
        assert [r.tool for r in screen.pending_rows] == ["fetch_remote_b"]
        await pilot.press("ctrl+n", *"three open tickets", "enter")
        await settle(pilot)
        assert "completed" in screen.status_text, screen.status_text
    session = store.load(sid)
    assert session.status == "completed"
    assert '{"orders": 12}' in (session.final_answer or "")
    assert "three open tickets" in (session.final_answer or "")


async def test_ctrl_o_moves_the_selection_and_escape_leaves_answer_mode(store):
    await waiting_session(store)
    app = ConsoleApp(StoreSource(store), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        assert screen.selected_call().call_id == "call_remote_a"
        await pilot.press("ctrl+o")
        assert screen.selected_call().call_id == "call_remote_b"
        await pilot.press("ctrl+n")
        assert screen.answering.call_id == "call_remote_b"
        await pilot.press("escape")
        assert screen.answering is None
        await pilot.press("ctrl+o")  # wraps around
        assert screen.selected_call().call_id == "call_remote_a"


async def test_ctrl_w_fails_the_selected_call_with_a_reason_and_resumes(store):
    sid = await waiting_session(store)
    app = ConsoleApp(StoreSource(store), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        await pilot.press("ctrl+b")
        await pilot.press("enter")  # an empty reason is refused: the question stays
        assert app.screen is not screen
        await pilot.press(*"system A is down", "enter")
        await settle(pilot)
        assert app.screen is screen
        assert "failed call_remote_a" in screen.status_text, screen.status_text
        assert [r.call_id for r in screen.pending_rows] == ["call_remote_b"]
        await pilot.press("ctrl+n", *"3 tickets", "enter")
        await settle(pilot)
    session = store.load(sid)
    assert session.status == "completed"
    failed = session.call("call_remote_a")
    assert failed.state == "failed" and failed.result.content == "system A is down"


async def test_a_user_tool_response_is_read_as_session_complete_reads_it(store):
    sid = await waiting_session(store)
    app = ConsoleApp(StoreSource(store), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        await pilot.press("ctrl+n", *'{"type": "text"}', "enter")  # no `text`: malformed
        await settle(pilot)
        assert screen.status_text.startswith("error: the answer: not a valid UserToolResponse")
        assert screen.answering is not None  # still answering: fix it and send again
        screen.query_one("#editor").value = '{"type": "text", "text": "twelve orders"}'
        await pilot.press("enter")
        await settle(pilot)
        assert screen.answering is None, screen.status_text
    assert store.load(sid).call("call_remote_a").result.content == "twelve orders"


async def test_answering_a_call_another_process_completed_meanwhile_shows_it(store, tmp_path):
    sid = await waiting_session(store)
    app = ConsoleApp(StoreSource(store), follow=False)  # nothing refreshes the panel
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        token = screen.selected_call().token
        answer = tmp_path / "a.json"
        answer.write_text('{"orders": 1}')
        command = [*CLI, "session", "complete", token, str(answer), "--store", str(store.path)]
        done = await anyio.run_process(command, check=False)  # another process answers it
        assert done.returncode == 0, done.stderr.decode()
        await pilot.press("ctrl+n", *'{"orders": 2}', "enter")
        await settle(pilot)
        assert screen.status_text == (
            "error: call call_remote_a was already completed by someone else with a"
            " different result; yours was refused, nothing changed"
        )
        assert app.is_running
        # The panel is read again: the call the other process answered has left it.
        assert [r.call_id for r in screen.pending_rows] == ["call_remote_b"]
    assert store.load(sid).call("call_remote_a").result.content == {"orders": 1}


async def test_a_long_sessions_history_is_loaded_on_demand(store):
    sid = await waiting_session(store)
    # whole_up_to=0: every session counts as long (one before its last turn is enough).
    app = ConsoleApp(StoreSource(store, whole_up_to=0), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        await pilot.press("ctrl+n", *"a", "enter")
        await settle(pilot)
        await pilot.press("ctrl+n", *"b", "enter")
        await settle(pilot)
        assert screen.document["status"] == "completed"
        assert screen.document["first_turn"] > 0  # only the recent part was read
        lines = [str(line) for line in screen.query_one("#conversation").lines]
        assert "earlier turn(s) not loaded" in lines[0]
        await pilot.press("ctrl+g")
        await settle(pilot)
        assert screen.document["first_turn"] == 0
        text = "\n".join(line.text for line in screen.query_one("#conversation").lines)
        assert "you  Gather the reports" in text
        assert "fetch_remote_a(call_remote_a)" in text
    assert store.load(sid).status == "completed"


async def test_enter_without_an_agent_file_and_outside_answer_mode_says_what_to_do(store):
    await waiting_session(store)
    app = ConsoleApp(StoreSource(store), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        screen.query_one("#editor").focus()
        await pilot.press(*"hello", "enter")
        assert screen.status_text.startswith("error: nothing to send")


async def test_a_call_another_process_completes_shows_live_from_the_event_log(store, tmp_path):
    sid = await waiting_session(store)
    source = StoreSource(store)
    app = ConsoleApp(source)  # following the store's event log
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        token = screen.pending_rows[0].token
        answer = tmp_path / "a.json"
        answer.write_text('"done elsewhere"')
        command = [*CLI, "session", "complete", token, str(answer), "--store", str(store.path)]
        done = await anyio.run_process(command, check=False)
        assert done.returncode == 0, done.stderr.decode()
        for _ in range(2000):  # a bound on the looks, not a timing
            if [r.call_id for r in screen.pending_rows] == ["call_remote_b"]:
                break
            await pilot.pause(0.01)
        assert [r.call_id for r in screen.pending_rows] == ["call_remote_b"]
        text = "\n".join(line.text for line in screen.query_one("#conversation").lines)
        assert "→ done elsewhere" in text
    assert store.load(sid).call("call_remote_a").result.content == "done elsewhere"
