"""`agents-runner tui [--agent-file A] [--store LOC | --server URL --token T]`: the
terminal console (runner/tui). On a store, the engine runs in this process (as the
session commands do: a store without leases is driven single-process); on a server, every
action is an HTTP request and the screens follow its event stream. With --agent-file, a
prompt sent from the editor starts a new session of that agent and runs it live."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer

from runner.cli.app import app, fail
from runner.cli.common import (
    DEFAULT_STORE,
    AgentFileOption,
    StoreOption,
    api_keys,
    open_sessions,
)
from runner.cli.settings import TuiSettings, current, env_name

if TYPE_CHECKING:
    from runner.tui import Source


@app.command("tui")
def tui(
    ctx: typer.Context,
    agent_file: AgentFileOption = None,
    store: StoreOption = DEFAULT_STORE,
    server: Annotated[
        str | None, typer.Option("--server", help="an `agents-runner serve` URL (not --store)")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar=env_name("token"),
            help="the server's bearer token (an operator's to act, a viewer's to look)",
        ),
    ] = None,
) -> None:
    """The terminal console: every session, its conversation, and the Pending panel to
    answer (Ctrl+N) or fail (Ctrl+B) the calls it waits on."""
    # Textual and the console are imported only by this command.
    from textual.logging import TextualHandler

    from runner.tui import ServerSource, StoreSource

    chosen = agent_file or (ctx.obj or {}).get("agent_file")
    if chosen is not None and not chosen.is_file():
        fail(f"--agent-file: {chosen} is not a file")
    # Log lines go to Textual's log, not over the screen.
    logging.getLogger().handlers[:] = [TextualHandler()]
    if server is not None:
        if not server.startswith(("http://", "https://")):
            fail(f"--server: expected an http:// or https:// URL, got {server!r}")
        _run(ServerSource(server, token, chosen))
        return
    if token is not None:
        fail("--token goes with --server")
    # Without an agent file the console only reads and answers: a store must be there.
    with open_sessions(store, create=chosen is not None) as opened:
        settings = replace(current(TuiSettings).agent_settings(), api_keys=api_keys(ctx.obj))
        _run(StoreSource(opened, chosen, settings=settings))


def _run(source: Source) -> None:
    from runner.tui import ConsoleApp

    ConsoleApp(source).run()


__all__ = ["tui"]
