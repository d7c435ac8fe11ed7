"""The `agents-runner` command. Each module here registers its commands on `app`:
isolation.py (isolate, describe, sweep)."""

from runner.cli import isolation  # noqa: F401  (registers its commands)
from runner.cli.app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
