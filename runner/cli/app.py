"""The typer application every command module registers on, and the one way to fail.

Bad input gets one line on stderr saying what was wrong and where, and a non-zero exit:
2 for a usage or input error, 1 when the call itself ended in an error.
"""

from __future__ import annotations

from typing import NoReturn

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Run tool calls in isolated workers through the v1 JSON envelope.",
)


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"agents-runner: error: {message}", err=True)
    raise typer.Exit(code)
