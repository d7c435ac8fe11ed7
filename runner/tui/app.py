"""`ConsoleApp`: the Textual application `agents-runner tui` runs, on one `Source`."""

from __future__ import annotations

from textual.app import App

from runner.tui.console import ConsoleScreen
from runner.tui.source import Source


class ConsoleApp(App[None]):
    """The console on `source` (closed when the app ends). `follow`: keep the screens
    live (off only for a test that wants nothing to change under it)."""

    TITLE = "agents-runner"
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, source: Source, *, follow: bool = True) -> None:
        super().__init__()
        self.source = source
        self.follow = follow
        self.sub_title = source.description

    def on_mount(self) -> None:
        self.push_screen(ConsoleScreen(self.source, self.follow))

    @property
    def console_screen(self) -> ConsoleScreen:
        """The main screen (under any question being asked)."""
        return next(s for s in self.screen_stack if isinstance(s, ConsoleScreen))

    async def on_unmount(self) -> None:
        await self.source.aclose()


__all__ = ["ConsoleApp"]
