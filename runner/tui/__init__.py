"""The terminal console (`agents-runner tui`), built with Textual: every session with its
conditions, the conversation of the selected one, and agents-exe's Pending panel and
answer mode to end the calls it waits on; the operator's actions beside them.

source.py: the `Source` interface the screens read and act through; store.py: a store
opened here (the engine runs in this process); server.py: `agents-runner serve` over
HTTP with its event stream; render.py: what is drawn, from a session document;
console.py: the main screen and its keys; screens.py: the questions it asks; app.py: the
App. Only runner.cli imports this package; it knows nothing of runner.server.
"""

from runner.tui.app import ConsoleApp
from runner.tui.server import ServerSource
from runner.tui.source import SessionRow, Source, SourceError, answer_result, answer_value
from runner.tui.store import StoreSource

__all__ = [
    "ConsoleApp",
    "ServerSource",
    "SessionRow",
    "Source",
    "SourceError",
    "StoreSource",
    "answer_result",
    "answer_value",
]
