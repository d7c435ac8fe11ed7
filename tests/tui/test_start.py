"""With an agent file, a prompt sent from the editor starts a new session and runs it
here, live: the list gains it, the conversation shows it, the Pending panel its calls."""

from __future__ import annotations

import pytest

from runner.tui import ConsoleApp, StoreSource
from tests.tui.conftest import AGENT_FILE, SIZE, screen_of, settle

pytestmark = pytest.mark.anyio


async def test_a_prompt_starts_a_session_that_runs_to_its_deferred_calls(store):
    app = ConsoleApp(StoreSource(store, AGENT_FILE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        assert screen.rows == {}
        assert "Prompt (Ctrl+L): Enter starts a new session" in str(
            screen.query_one("#editor-label").render()
        )
        screen.query_one("#editor").focus()
        await pilot.press(*"Fetch everything", "enter")
        await settle(pilot)
        (sid,) = screen.rows
        assert screen.session_id == sid
        assert screen.status_text == f"session {sid} is waiting on 2 calls", screen.status_text
        assert [r.call_id for r in screen.pending_rows] == ["call_remote_a", "call_remote_b"]
        text = "\n".join(line.text for line in screen.query_one("#conversation").lines)
        assert "you  Fetch everything" in text
        assert "fetch_local(call_local)" in text
        await pilot.press("ctrl+n", *"A", "enter")
        await settle(pilot)
        await pilot.press("ctrl+n", *"B", "enter")
        await settle(pilot)
        assert screen.document["status"] == "completed"
    assert store.load(sid).status == "completed"


async def test_an_empty_prompt_is_refused(store):
    app = ConsoleApp(StoreSource(store, AGENT_FILE), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        screen.query_one("#editor").focus()
        await pilot.press("space", "enter")
        assert screen.status_text == "error: the prompt is empty"
    assert store.list() == []
