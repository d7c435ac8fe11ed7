"""The console on `agents-runner serve`'s API (ServerSource): a real uvicorn on 127.0.0.1
over a SQLite store, the same keys, the server's problems shown, and live updates that
arrive through GET /v1/events (Server-Sent Events)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runner.server import create_app
from runner.stores import SQLiteStore
from runner.tui import ConsoleApp, ServerSource
from tests.server.conftest import TOKENS, agents_dir, grants, serving
from tests.tui.conftest import AGENT_FILE, SIZE, screen_of, settle, waiting_session

pytestmark = pytest.mark.anyio
#: Pauses a test lets the console take for an update to arrive (a bound, not a timing).
PATIENCE = 2000


@pytest.fixture
def server(store: SQLiteStore, tmp_path: Path) -> Iterator[str]:
    with serving(create_app(store, agents_dir(tmp_path), grants())) as url:
        yield url


async def test_answering_both_calls_through_the_server_reaches_the_final_answer(store, server):
    sid = await waiting_session(store)
    app = ConsoleApp(ServerSource(server, TOKENS["operator"]), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        assert screen.session_id == sid
        assert screen.rows[sid].conditions == ("waiting",)
        await pilot.press("ctrl+n", *'{"orders": 12}', "enter")
        await settle(pilot)
        assert screen.status_text == "answered the call; session " + sid + " is waiting", (
            screen.status_text
        )
        await pilot.press("ctrl+n", *"3 tickets", "enter")
        await settle(pilot)
        assert screen.status_text.startswith(f"answered the call; session {sid} is completed")
        assert screen.document["status"] == "completed"
    session = store.load(sid)
    assert session.status == "completed" and "3 tickets" in (session.final_answer or "")


async def test_a_call_completed_by_another_client_arrives_live_by_sse(store, server):
    sid = await waiting_session(store)
    source = ServerSource(server, TOKENS["operator"])
    app = ConsoleApp(source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        for _ in range(PATIENCE):  # the stream is followed once it says it subscribed
            if source.stream_state == "live":
                break
            await pilot.pause(0.01)
        assert source.stream_state == "live"
        token = screen.pending_rows[0].token
        seen = source.last_event_id
        with served_client(server) as http:
            answer = http.post(f"/v1/continuations/{token}", json={"result": {"orders": 1}})
            assert answer.status_code == 200, answer.text
        for _ in range(PATIENCE):
            if [r.call_id for r in screen.pending_rows] == ["call_remote_b"]:
                break
            await pilot.pause(0.01)
        assert [r.call_id for r in screen.pending_rows] == ["call_remote_b"]
        assert source.last_event_id not in (None, seen)  # it came by the event stream
    assert store.load(sid).call("call_remote_a").state == "completed"


async def test_the_servers_409_for_a_call_completed_meanwhile_is_shown(store, server):
    await waiting_session(store)
    app = ConsoleApp(ServerSource(server, TOKENS["operator"]), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        token = screen.selected_call().token
        with served_client(server) as http:
            assert http.post(f"/v1/continuations/{token}", json={"result": "theirs"}).is_success
        await pilot.press("ctrl+n", *"mine", "enter")
        await settle(pilot)
        assert screen.status_text.startswith("error: already completed by someone else: call"
                                             " call_remote_a already ended")  # fmt: skip
        assert app.is_running


async def test_a_viewer_sees_sessions_but_its_actions_are_refused_in_words(store, server):
    sid = await waiting_session(store)
    app = ConsoleApp(ServerSource(server, TOKENS["viewer"]), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        assert screen.session_id == sid
        await pilot.press("ctrl+s", "y")
        await settle(pilot)
        assert screen.status_text == (
            "error: the viewer token 'viewer' may not do this (403, forbidden)"
        )
    assert store.load(sid).status == "waiting"


async def test_a_prompt_starts_a_session_on_the_server_from_the_agent_file(store, server):
    app = ConsoleApp(ServerSource(server, TOKENS["operator"], AGENT_FILE), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        screen.query_one("#editor").focus()
        await pilot.press(*"Fetch everything", "enter")
        await settle(pilot)
        (sid,) = screen.rows
        assert screen.status_text == f"session {sid} is waiting on 2 calls", screen.status_text
        assert [r.call_id for r in screen.pending_rows] == ["call_remote_a", "call_remote_b"]
    assert store.load(sid).agent_slug == "my-agent"


async def test_an_unreachable_server_is_said_not_raised():
    app = ConsoleApp(ServerSource("http://127.0.0.1:9", "x"), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert screen_of(app).status_text.startswith(
            "error: cannot reach the server at http://127.0.0.1:9"
        )


def served_client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKENS['operator']}"},
                        timeout=30)  # fmt: skip
