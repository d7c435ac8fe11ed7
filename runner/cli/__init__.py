"""The `agents-runner` command. Each module here registers its commands on `app`:
isolation.py (isolate, describe, sweep), check.py (worker-check), run.py, session.py, demo.py."""

from runner.cli import (
    check,  # noqa: F401  (worker-check)
    demo,  # noqa: F401  (demo)
    isolation,  # noqa: F401  (registers its commands)
    run,  # noqa: F401  (run, and the global --agent-file)
    session,  # noqa: F401  (session ...)
)
from runner.cli.app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
