"""The console's keys (issue 24, item 7): Ctrl+L puts the cursor in the message editor
and the footer says so; no binding takes a key a text field uses, so Ctrl+W in the
editor deletes a word instead of failing a call."""

from __future__ import annotations

import pytest
from textual.binding import Binding
from textual.widgets import Footer, Input, TextArea

from runner.tui import ConsoleApp, StoreSource
from runner.tui.console import ConsoleScreen
from tests.tui.conftest import SIZE, screen_of, settle, waiting_session

pytestmark = pytest.mark.anyio


def keys_of(bindings: object) -> set[str]:
    found = set()
    for binding in bindings:  # type: ignore[attr-defined]
        if isinstance(binding, Binding):
            found.update(k.strip() for k in binding.key.split(","))
    return found


def test_no_console_key_is_one_a_text_field_uses() -> None:
    text_keys = keys_of(Input.BINDINGS) | keys_of(TextArea.BINDINGS)
    ours = keys_of(ConsoleScreen.BINDINGS) - {"up", "down", "escape"}  # not priority
    assert ours & text_keys == set()
    assert all(b.priority for b in ConsoleScreen.BINDINGS
               if isinstance(b, Binding) and b.key in ours)  # fmt: skip


async def test_ctrl_l_focuses_the_editor_and_the_footer_shows_it(store) -> None:
    await waiting_session(store)
    app = ConsoleApp(StoreSource(store), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        assert app.focused is screen.query_one("#filter")
        await pilot.press("ctrl+l")
        assert app.focused is screen.query_one("#editor")
        active = app.active_bindings.items()
        shown = {key: bound.binding.description for key, bound in active if bound.binding.show}
        assert shown["ctrl+l"] == "message"
        assert screen.query_one(Footer) is not None


async def test_ctrl_w_in_the_editor_deletes_a_word_and_fails_nothing(store) -> None:
    sid = await waiting_session(store)
    app = ConsoleApp(StoreSource(store), follow=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        await pilot.press("ctrl+l", *"three open tickets", "ctrl+w")
        await settle(pilot)
        assert screen.query_one("#editor", Input).value == "three open "
        assert app.screen is screen  # no question about failing a call was asked
    assert {c.state for c in store.load(sid).waiting_on()} == {"deferred"}
