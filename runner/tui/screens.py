"""The console's questions: confirm an operator action (it says what it will do first),
and ask why a call fails."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

DIALOG_CSS = """
NAME { align: center middle; }
NAME #dialog { width: 80; height: auto; border: thick $warning; background: $surface;
          padding: 1 2; }
NAME #dialog Static { width: 100%; }
NAME .keys { color: $text-muted; margin-top: 1; }
"""


class ConfirmScreen(ModalScreen[bool]):
    """What an action will do, and y to do it (n or Escape: not)."""

    DEFAULT_CSS = DIALOG_CSS.replace("NAME", "ConfirmScreen")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "yes"),
        Binding("n", "answer(False)", "no"),
        Binding("escape", "answer(False)", "no", show=False),
    ]

    def __init__(self, title: str, what: str) -> None:
        super().__init__()
        self.title_text, self.what = title, what

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(Text(self.title_text, style="bold"), id="confirm-title")
            yield Static(self.what, id="confirm-what", markup=False)
            yield Static("y: do it    n or Esc: leave it", classes="keys")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class ReasonScreen(ModalScreen[str | None]):
    """The reason a call fails (what the model is told); Enter sends, Escape leaves."""

    DEFAULT_CSS = DIALOG_CSS.replace("NAME", "ReasonScreen")
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "leave", "leave", show=False)]

    def __init__(self, call: str) -> None:
        super().__init__()
        self.call = call

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(Text(f"Fail {self.call}", style="bold"), id="reason-title")
            yield Static("Why does it fail? The model is told this reason.", markup=False)
            yield Input(placeholder="the reason", id="reason")
            yield Static("Enter: fail the call and resume    Esc: leave it", classes="keys")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.value.strip():
            self.dismiss(event.value.strip())
        else:
            self.query_one("#reason-title", Static).update(
                Text(f"Fail {self.call}", style="bold") + ": the reason must say why"
            )

    def action_leave(self) -> None:
        self.dismiss(None)


__all__ = ["ConfirmScreen", "ReasonScreen"]
