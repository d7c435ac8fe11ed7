"""`agents-runner worker-check`: the conformance battery against one worker.

Exit status: 0 when every required check passes, 1 when one fails, 2 for bad input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from runner.cli.app import app, fail
from runner.cli.isolation import Argv, Env, EnvAllow, Image, RunnerKind, build_runner
from runner.conformance import VERBOSE_ENV, FixtureError, Report, check_worker, load_fixtures

_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}


@app.command("worker-check")
def worker_check(
    runner: RunnerKind,
    argv: Argv = None,
    image: Image = None,
    fixture: Annotated[
        Path | None,
        typer.Option("--fixture", help='JSON file: {"tool": {arguments}, ...} for happy calls'),
    ] = None,
    probe_timeout: Annotated[
        float, typer.Option("--probe-timeout", help="seconds each probe may take")
    ] = 10.0,
    env: Env = None,
    env_allow: EnvAllow = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Check that a worker speaks envelope v1: describe, schemas, calls, versions, the
    malformed-request battery, limits, deadlines and stdout purity."""
    if probe_timeout <= 0:
        fail(f"--probe-timeout must be positive, got {probe_timeout}")
    try:
        fixtures = load_fixtures(fixture) if fixture else {}
    except FixtureError as exc:
        fail(f"--fixture: {exc}")
    verbose = [f"{name}={value}" for name, value in VERBOSE_ENV.items()]
    chosen = build_runner(runner, image, argv, env=[*verbose, *(env or [])], env_allow=env_allow)
    target = image if runner == "docker" else " ".join(argv or [])

    async def check() -> Report:
        async with chosen:
            return await check_worker(
                chosen, fixtures, target=target or "", probe_timeout_s=probe_timeout
            )

    report = anyio.run(check)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), ensure_ascii=False, indent=2))
    else:
        print_table(report)
    raise typer.Exit(0 if report.ok else 1)


def print_table(report: Report) -> None:
    console = Console(highlight=False)
    table = Table(title=f"worker-check: {report.target}", title_justify="left")
    table.add_column("check")
    table.add_column("result")
    table.add_column("why")
    for check in report.checks:
        mark = check.status.upper() + ("" if check.required else " (optional)")
        table.add_row(check.id, f"[{_STYLE[check.status]}]{mark}[/]", _plain(check.detail))
    console.print(table)
    failed = report.failed()
    if failed:
        console.print(f"[bold red]{len(failed)} required check(s) failed:[/] "
                      + ", ".join(c.id for c in failed))  # fmt: skip
    else:
        console.print(f"[green]all required checks passed[/] ({len(report.checks)} checks)")


def _plain(text: str) -> str:
    """A worker's words shown as text: no rich markup, no terminal control characters."""
    cleaned = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return escape(cleaned)
