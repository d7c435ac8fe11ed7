"""SVG snapshots of the console's main screens (pytest-textual-snapshot): what the
operator sees, drawn from a real SQLite store. The sessions are made by the engine and
then stored again under fixed ids, tokens and times, and the console measures ages
against a fixed clock, so every run draws the same picture.
`pytest tests/tui --snapshot-update` redraws them after a deliberate change;
docs/images/tui-pending.svg (the console page's picture, docs/console.md) is the first one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from runner.stores import SQLiteStore
from runner.tui import ConsoleApp, StoreSource
from tests.tui.conftest import SIZE, waiting_session

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = Path(__file__).parent / "__snapshots__" / "test_snapshots"
NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000
WAITING_ID = "s-7f3c2a10-0000-4000-8000-000000000001"
DONE_ID = "s-1b9e4d20-0000-4000-8000-000000000002"


def _fixed(made: SQLiteStore, into: SQLiteStore, sid: str, new_id: str, age_min: int) -> None:
    """Store `sid` from `made` again in `into` with fixed id, tokens and times."""
    session = made.load(sid)
    calls = {}
    for n, (key, call) in enumerate(sorted(session.calls.items())):
        expires = NOW + 120 * MINUTE if call.state == "deferred" and n == 2 else None
        calls[key] = call.model_copy(update={
            "token": f"00000000-0000-4000-8000-{n:012d}", "idempotency_key": f"{new_id}:{key}",
            "created_ms": NOW - (age_min + 1) * MINUTE, "updated_ms": NOW - age_min * MINUTE,
            "expires_ms": expires})  # fmt: skip
    created, updated = NOW - (age_min + 1) * MINUTE, NOW - age_min * MINUTE
    fixed = session.model_copy(update={"id": new_id, "calls": calls, "version": 0,
                                       "created_ms": created, "updated_ms": updated})  # fmt: skip
    into.create(fixed, made.agent_document(session.agent_hash))


@pytest.fixture
def fixed_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    made, fixed = SQLiteStore(tmp_path / "made.db"), SQLiteStore(tmp_path / "fixed.db")
    try:

        async def make() -> None:
            waiting = await waiting_session(made, "Gather the local inventory and both reports")
            _fixed(made, fixed, waiting, WAITING_ID, 4)
            done = await waiting_session(made, "The same, yesterday")
            source = StoreSource(made)
            for row_token in [c.token for c in made.load(done).waiting_on()]:
                await source.complete(row_token, '{"orders": 17}')
            _fixed(made, fixed, done, DONE_ID, 60 * 26)

        anyio.run(make)
        yield fixed
    finally:
        made.close()
        fixed.close()


def console(store: SQLiteStore) -> ConsoleApp:
    source = StoreSource(store, clock=lambda: NOW)
    source.description = "SQLite store .agents-runner/state.db"
    return ConsoleApp(source, follow=False)


def test_the_pending_panel_of_a_waiting_session(fixed_store, snap_compare):
    assert snap_compare(console(fixed_store), terminal_size=SIZE)


def test_answer_mode_says_which_call_the_editor_answers(fixed_store, snap_compare):
    keys = ["ctrl+o", "ctrl+n", *'{"open_tickets": 3}']
    assert snap_compare(console(fixed_store), press=keys, terminal_size=SIZE)


def test_cancel_says_what_it_will_do_before_doing_it(fixed_store, snap_compare):
    assert snap_compare(console(fixed_store), press=["ctrl+s"], terminal_size=SIZE)


def test_the_list_filtered_by_typing_and_a_completed_session(fixed_store, snap_compare):
    assert snap_compare(console(fixed_store), press=[*"complet"], terminal_size=SIZE)


def test_the_readme_picture_is_the_pending_panel_snapshot():
    """The console page's picture is the first snapshot; after --snapshot-update, copy it:
    cp tests/tui/__snapshots__/test_snapshots/test_the_pending_panel_of_a_waiting_session.svg
       docs/images/tui-pending.svg"""
    drawn = SNAPSHOTS / "test_the_pending_panel_of_a_waiting_session.svg"
    picture = REPO / "docs" / "images" / "tui-pending.svg"
    assert picture.read_text() == drawn.read_text(), "copy the new snapshot (see above)"
