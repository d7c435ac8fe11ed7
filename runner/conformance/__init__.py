"""worker-check: does a worker speak envelope v1 correctly, whatever its language?

`check_worker(runner, fixtures)` sends a battery of requests through a runner (local
process or Docker) and returns a Report with one verdict per check id. What is checked
and why is listed in docs/envelope-v1.md ("Conformance"), with the level of each check
(report.py: `required`, `strict`, `advisory`); the CLI is `agents-runner worker-check`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from runner.conformance import capabilities
from runner.conformance.battery import VERBOSE_ENV, Battery
from runner.conformance.lint import lint_schema
from runner.conformance.report import LEVELS, Check, Level, Report
from runner.isolation.base import ExchangeRunner

__all__ = [
    "LEVELS",
    "VERBOSE_ENV",
    "Check",
    "FixtureError",
    "Level",
    "Report",
    "check_worker",
    "lint_schema",
    "load_fixtures",
    "parse_fixtures",
]


class FixtureError(ValueError):
    """The fixture file is unreadable or not `{"tool": {arguments...}, ...}`."""


def load_fixtures(path: Path) -> dict[str, dict[str, Any]]:
    """Read a fixture file: a JSON object mapping each tool name to its arguments."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FixtureError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise FixtureError(f"{path} is not UTF-8: {exc}") from None
    return parse_fixtures(text, str(path))


def parse_fixtures(text: str, source: str = "the fixtures") -> dict[str, dict[str, Any]]:
    """Fixtures given as JSON text (`--fixture-json`); `source` names them in errors."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise FixtureError(f"{source} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise FixtureError(f"{source}: expected an object mapping tool names to arguments")
    for tool, arguments in data.items():
        if not isinstance(arguments, dict):
            raise FixtureError(f"{source}: the arguments of {tool!r} must be an object")
    return data


async def check_worker(
    runner: ExchangeRunner,
    fixtures: dict[str, dict[str, Any]] | None = None,
    *,
    target: str = "worker",
    probe_timeout_s: float = 10.0,
    concurrency: int = 4,
) -> Report:
    """Run every check against the worker behind `runner`. Never hangs: each probe has
    `probe_timeout_s`. Give the runner VERBOSE_ENV so the stdout check means something."""
    report = Report(target)
    battery = Battery(runner, fixtures or {}, report, probe_timeout_s, concurrency)
    described = await battery.describe()
    tools = described.tools if described else []
    first_tool = tools[0].name if tools else "echo"
    supported = described.supported_versions if described else ["1.0"]
    happy: dict[str, Any] = {}

    async def run_happy(tool: Any) -> None:
        happy[tool.name] = await battery.happy(tool)

    if described is not None:
        await capabilities.negotiate(battery, described)

    async with anyio.create_task_group() as group:
        for tool in tools:
            group.start_soon(run_happy, tool)
        group.start_soon(battery.versions, first_tool, supported)
        group.start_soon(battery.malformed)
        group.start_soon(battery.unknown_tool)
        if tools:
            group.start_soon(battery.unknown_fields, _with_fixture(tools, fixtures))
            group.start_soon(battery.bad_arguments, tools[0])
            group.start_soon(battery.deadline, _with_fixture(tools, fixtures))
            group.start_soon(battery.critical, _with_fixture(tools, fixtures))
            group.start_soon(capabilities.files, battery, _with_fixture(tools, fixtures))
            group.start_soon(capabilities.events, battery, _with_fixture(tools, fixtures))
    for tool in tools:
        await battery.result_limit(tool, happy.get(tool.name))
    battery.summarize()
    order = {check_id: i for i, check_id in enumerate(_ORDER)}
    report.checks.sort(key=lambda c: order.get(c.id.split(".")[0], len(order)))
    return report


_ORDER = ("describe", "schema", "call", "echo", "limit", "version", "request", "tool",
          "arguments", "secrets", "deadline", "critical", "files", "events", "stdout", "exit_code",
          "output")  # fmt: skip


def _with_fixture(tools: list[Any], fixtures: dict[str, Any] | None) -> Any:
    """The first tool that has a fixture (probes that need a valid call use it)."""
    return next((t for t in tools if fixtures and t.name in fixtures), tools[0])
