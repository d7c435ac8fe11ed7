"""`agents-runner worker-check`: the conformance battery against one worker.

Exit status: 0 when every `required` check passes (and, with --strict, every `strict`
one), 1 when one fails, 2 for bad input.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Annotated

import anyio
import typer
from rich.text import Text

from envelopes import controls
from runner.cli.app import app, fail
from runner.cli.display import print_table as show_table
from runner.cli.display import say
from runner.cli.isolation import (
    Argv,
    ContainerRuntime,
    Env,
    EnvAllow,
    Image,
    RunnerKind,
    build_runner,
)
from runner.conformance import (
    VERBOSE_ENV,
    FixtureError,
    Report,
    check_worker,
    load_fixtures,
    parse_fixtures,
)

_STYLE = MappingProxyType({"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"})


@app.command("worker-check")
def worker_check(
    runner: RunnerKind,
    argv: Argv = None,
    image: Image = None,
    fixture: Annotated[
        Path | None,
        typer.Option("--fixture", help='JSON file: {"tool": {arguments}, ...} for happy calls'),
    ] = None,
    fixture_json: Annotated[
        str | None,
        typer.Option("--fixture-json", help="the fixtures as JSON text instead of a file"),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="fail on `strict` checks too (exact INVALID_REQUEST)"),
    ] = False,
    probe_timeout: Annotated[
        float, typer.Option("--probe-timeout", help="seconds each probe may take")
    ] = 10.0,
    env: Env = None,
    env_allow: EnvAllow = None,
    runtime: ContainerRuntime = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Check that a worker speaks envelope v1: describe, schemas, calls, versions, the
    malformed-request battery, limits, deadlines, stdout purity, and the 1.1 files and
    events it declares. Each check is `required`, `strict` or `advisory`."""
    if probe_timeout <= 0:
        fail(f"--probe-timeout must be positive, got {probe_timeout}")
    if fixture is not None and fixture_json is not None:
        fail("give --fixture FILE or --fixture-json TEXT, not both")
    try:
        if fixture_json is not None:
            fixtures = parse_fixtures(fixture_json, "the --fixture-json text")
        else:
            fixtures = load_fixtures(fixture) if fixture else {}
    except FixtureError as exc:
        fail(f"--fixture: {exc}")
    verbose = [f"{name}={value}" for name, value in VERBOSE_ENV.items()]
    chosen = build_runner(runner, image, argv, env=[*verbose, *(env or [])], env_allow=env_allow,
                          runtime=runtime)  # fmt: skip
    target = image if runner == "docker" else " ".join(argv or [])
    if runtime is not None:
        target = f"{target} (runtime {runtime})"

    async def check() -> Report:
        async with chosen:
            return await check_worker(
                chosen, fixtures, target=target or "", probe_timeout_s=probe_timeout
            )

    report = anyio.run(check)
    if as_json:
        typer.echo(controls.dumps(report.to_dict(strict), indent=2))
    else:
        print_table(report, strict)
    raise typer.Exit(0 if not report.failed(strict) else 1)


def print_table(report: Report, strict: bool = False) -> None:
    rows = []
    for check in report.checks:
        # A failure that does not count in this mode is shown, not styled as fatal.
        style = _STYLE[check.status] if check.counts(strict) else "yellow"
        rows.append((check.id, check.level, Text(check.status.upper(), style=style),
                     check.detail))  # fmt: skip
    title = f"worker-check: {report.target}"
    show_table(("check", "level", "result", "why"), rows, title=title, ids=(0,))
    for level in ("required", "strict"):
        failed = report.failed_at(level)
        counted = level == "required" or strict
        if failed:
            style, note = ("bold red", "") if counted else ("yellow", " (counted with --strict)")
            say(Text(f"{len(failed)} {level} check(s) failed{note}:", style=style), " ",
                ", ".join(c.id for c in failed))  # fmt: skip
    if not report.failed(strict):
        levels = "required and strict" if strict else "required"
        say(Text(f"all {levels} checks passed", style="green"), f" ({len(report.checks)} checks)")
