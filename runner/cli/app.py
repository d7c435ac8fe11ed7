"""The typer application every command module registers on, and the one way to fail.

Bad input gets one line on stderr saying what was wrong and where, and a non-zero exit:
2 for a usage or input error, 1 when the call itself ended in an error.
"""

from __future__ import annotations

import logging
from typing import NoReturn

import typer

from envelopes.controls import escape_controls

#: The widest help text, in columns (narrower terminals get their own width).
HELP_WIDTH = 120

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: paragraphs reflowed to the terminal (never the docstrings' own line
    # breaks), flags without a `<bool>`, and no markup read into `[...]` in help texts.
    rich_markup_mode=None,
    context_settings={"max_content_width": HELP_WIDTH},
    help="Run tool calls in isolated workers through the v1 JSON envelope.",
)


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr (its controls escaped: a message may quote a worker) and exit."""
    typer.echo(f"agents-runner: error: {escape_controls(message, multiline=True)}", err=True)
    raise typer.Exit(code)


class EscapingFormatter(logging.Formatter):
    """Log lines with their control characters escaped: a record may quote a sandbox (an
    egress refusal's host name, a worker's stderr)."""

    def format(self, record: logging.LogRecord) -> str:
        return escape_controls(super().format(record), multiline=True)


def configure_logging(level: str) -> None:
    """The library's log lines on stderr, one per line, at `level` (a logging level's name:
    runner.cli.settings reads it from AGENTS_RUNNER_LOG_LEVEL)."""
    handler = logging.StreamHandler()
    handler.setFormatter(EscapingFormatter("agents-runner: %(levelname)s: %(name)s: %(message)s"))
    logging.basicConfig(level=logging.getLevelNamesMapping()[level], handlers=[handler])
