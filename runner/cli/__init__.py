"""The `agents-runner` command. Each module here registers its commands on `app`:
isolation.py (isolate, describe, sweep)."""

from runner.cli import (
    audit,  # noqa: F401  (audit)
    check,  # noqa: F401  (worker-check)
    demo,  # noqa: F401  (demo)
    isolation,  # noqa: F401  (registers its commands)
    run,  # noqa: F401  (run, and the global --agent-file)
    serve,  # noqa: F401  (serve)
    session,  # noqa: F401  (session ...)
    tui,  # noqa: F401  (tui)
    worker,  # noqa: F401  (worker)
)
from runner.cli.app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
