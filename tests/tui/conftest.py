"""Stores where the seed's scripted agent (examples/agents/agents-exe) waits on its two
deferred calls, made by the real engine on a real SQLite file, and helpers to drive the
console with Textual's Pilot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.session import load_agent, with_durable_workflows
from runner.stores import SQLiteStore
from runner.tui import ConsoleApp
from runner.tui.console import ConsoleScreen

SEED = Path(__file__).resolve().parents[2] / "examples" / "agents" / "agents-exe"
AGENT_FILE = SEED / "my-agent.scripted.json"
SIZE = (120, 36)


async def waiting_session(store: SQLiteStore, prompt: str = "Gather the reports") -> str:
    """A session of the seed agent waiting on fetch_remote_a and fetch_remote_b (its
    fetch_local call ran): its id."""
    agent = with_durable_workflows(load_agent(AGENT_FILE).with_mode("asynchronous"), store)
    session = agent.start(prompt)
    report = await agent.resume(session.id)
    assert report.status == "waiting", report.to_dict()
    assert {c.tool for c in report.session.waiting_on()} == {"fetch_remote_a", "fetch_remote_b"}
    return session.id


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "state.db")
    try:
        yield opened
    finally:
        opened.close()


def screen_of(app: ConsoleApp) -> ConsoleScreen:
    return app.console_screen


async def settle(pilot) -> None:
    """Let the workers the last keys started finish, and the screen redraw."""
    for _ in range(3):
        await pilot.pause()
        busy = [w for w in pilot.app.workers if w.group != "follow"]
        if busy:  # (an empty list means every worker, the endless follower too)
            await pilot.app.workers.wait_for_complete(busy)
    await pilot.pause()
