"""A running call's live output on the session screen: a session started from the editor
runs here; its isolated call's worker (tests/session/streaming_worker.py, through the
local runner) streams progress and lines, then waits for a gate. While it waits, the live
panel shows the call's latest progress and last lines; once the call ends, the panel
goes and the conversation shows the output kept with the call. The same panel is fed
from a server's `call.output` messages by ServerSource (LiveCalls.add, checked below)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from runner.tui import ConsoleApp, StoreSource
from runner.tui.render import live
from runner.tui.source import LiveCalls
from tests.tui.conftest import SIZE, screen_of, settle

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).resolve().parents[1] / "session" / "streaming_worker.py"


def build_agent(tmp_path: Path, gate: Path) -> Path:
    path = tmp_path / "build.json"
    path.write_text(json.dumps({
        "slug": "build",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": "c1", "name": "build", "arguments": {"steps": 4}}]},
            {"text": "done: {{result:c1}}"}]},
        "tools": [{"name": "build", "parameters": {"type": "object"}}],
        "toolCallPolicyConfig": {"default": {"tag": "runIsolated", "spec": {
            "tag": "localProcess", "argv": [sys.executable, "-S", str(WORKER), str(gate)],
            "timeoutSeconds": 300}}},
    }))  # fmt: skip
    return path


async def until(pilot, predicate, what: str, rounds: int = 1200) -> None:
    """Let the app run until `predicate()` holds (the bound only catches a hang)."""
    for _ in range(rounds):
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"never happened: {what}")


async def test_the_session_screen_shows_a_running_calls_progress_and_lines(store, tmp_path):
    gate = tmp_path / "gate"
    app = ConsoleApp(StoreSource(store, build_agent(tmp_path, gate)))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        panel = screen.query_one("#live")
        assert not panel.display  # nothing streams yet: no panel
        screen.query_one("#editor").focus()
        await pilot.press(*"Build it", "enter")

        def shown() -> str:
            return str(panel.render()) if panel.display else ""

        await until(pilot, lambda: "stdout| line 4" in shown(), "the last line shown")
        text = shown()
        assert "build (c1)" in text and "100% step 4 of 4" in text
        # The last three lines of the call; the older ones scrolled away.
        assert "stdout| line 2" in text and "stdout| line 1" not in text
        gate.touch()
        await settle(pilot)
        assert screen.document["status"] == "completed"
        assert not panel.display  # the call ended: its stored output shows instead
        conversation = "\n".join(line.text for line in screen.query_one("#conversation").lines)
        assert "streamed 8 event(s) · 100% step 4 of 4 · last: line 4" in conversation


def test_server_messages_feed_the_same_panel():
    heard = LiveCalls()
    for seq, event in enumerate([{"type": "progress", "fraction": 0.25, "text": "warming up"},
                                 {"type": "log", "stream": "stderr", "text": "a\nb"},
                                 {"type": "partial", "text": "half"}], 1):  # fmt: skip
        heard.add({"kind": "call.output", "session_id": "s-1", "call_id": "c1", "tool": "build",
                   "attempt": 2, "event": {"call_id": "c1", "seq": seq, **event}})  # fmt: skip
    heard.add({"session_id": "s-1", "event": "not an object"})  # malformed: ignored
    document = {"calls": {"c1": {"state": "running"}}}
    text = str(live(document, heard.of("s-1")))
    assert "build (c1) · attempt 2  25% warming up" in text
    assert "stderr| a" in text and "stderr| b" in text and "partial| half" in text
    assert live({"calls": {"c1": {"state": "completed"}}}, heard.of("s-1")) is None
    assert heard.of("s-2") == []
