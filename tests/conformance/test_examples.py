"""The four example workers pass worker-check, `strict` level included, through both runners
(eight runs), as does the worked 1.1 worker in Node.js (node-files, local), and their
`ledger_append` writes once per idempotency key."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from envelopes.v1 import CallContext, RequestLimits, ToolCallRequest, ToolRef
from runner.conformance import Report, probes
from runner.isolation import LocalProcessRunner
from tests.conformance.conftest import (
    EXAMPLES,
    PYTHON,
    docker_runner,
    local_runner,
    require_image,
    require_program,
    run_check,
)
from tests.docs import blocks

LANGUAGES = ("bash", "python", "node", "go")
#: The worked 1.1 worker (files, collect, events, critical) written from the spec, local only.
NODE_1_1 = "node-files"
GRAMMAR = ("leading_zero", "major_only", "number", "kind_first")
MALFORMED = ("empty", "truncated", "bom", "invalid_utf8", "duplicate_keys", "nan",
             "lone_surrogate", "deep_nesting", "huge_string", "missing_field",
             "extension_key")  # fmt: skip


def local_argv(language: str, request: pytest.FixtureRequest) -> list[str]:
    if language == "bash":
        require_program("jq")
        return ["/bin/bash", str(EXAMPLES / "bash" / "worker.sh")]
    if language == "python":
        return [PYTHON, str(EXAMPLES / "python" / "worker.py")]
    if language in ("node", NODE_1_1):
        return [require_program("node"), str(EXAMPLES / language / "worker.js")]
    return [str(request.getfixturevalue("go_binary"))]


@pytest.fixture(
    scope="module",
    params=[(lang, r) for lang in LANGUAGES for r in ("local", "docker")] + [(NODE_1_1, "local")],
    ids=lambda p: f"{p[0]}-{p[1]}",
)
def example_report(request: pytest.FixtureRequest, fixtures: dict) -> Report:
    language, runner_kind = request.param
    if runner_kind == "local":
        runner = local_runner(*local_argv(language, request))
    else:
        engine = request.getfixturevalue("engine")
        runner = docker_runner(require_image(engine, f"agents-runner/example-{language}:latest"))
    return run_check(runner, fixtures)


def test_the_example_passes_every_required_and_strict_check(example_report: Report) -> None:
    failed = {c.id: c.detail for c in example_report.failed(strict=True)}
    assert failed == {}, json.dumps(example_report.to_dict(), indent=1)


def test_the_example_exercises_the_whole_battery(example_report: Report) -> None:
    checks = example_report.by_id()
    expected = [
        "describe.valid",
        "schema.echo",
        "schema.ledger_append",
        "call.echo",
        "call.ledger_append",
        "echo.echo",
        "limit.echo",
        "version.2.0",
        "version.0.9",
        "version.1.999",
        *(f"version.{probe}{suffix}" for probe in GRAMMAR for suffix in ("", ".strict")),
        "version.refusal",
        "request.reserved_id",
        "request.empty",
        "request.truncated",
        "request.bom",
        "request.invalid_utf8",
        "request.duplicate_keys",
        "request.nan",
        "request.lone_surrogate",
        "request.deep_nesting",
        "request.huge_string",
        "request.missing_field",
        "request.extension_key",
        *(f"request.{probe}.strict" for probe in MALFORMED),
        "request.unknown_fields",
        "tool.unknown",
        "arguments.invalid",
        "secrets.canary",
        "deadline.expired",
        "stdout.pure",
        "exit_code",
        "output.controls",
        "describe.capabilities",
    ]
    assert {i: checks[i].status for i in expected if i in checks} == dict.fromkeys(expected, "pass")
    assert {checks[f"request.{probe}.strict"].level for probe in MALFORMED} == {"strict"}
    assert checks["request.bom"].level == "required"
    assert checks["version.refusal"].level == checks["request.reserved_id"].level == "strict"


def test_the_sdk_example_is_checked_at_1_1_and_the_others_stay_1_0(example_report: Report) -> None:
    checks = example_report.by_id()
    worker = checks["describe.valid"].detail.split()[0]
    if worker in ("example-python", "example-node-files"):  # the SDK, and the worked 1.1 one
        assert checks["describe.capabilities"].detail == "1.1; capabilities: events, files"
        one_one = ["files.roundtrip", "files.trailing_globstar", "files.parent_of_other.strict",
                   "events.framing", "events.budget", *probes.CRITICAL_REFUSED,
                   "critical.understood"]  # fmt: skip
        assert {i: checks[i].status for i in one_one} == dict.fromkeys(one_one, "pass")
        assert {checks[i].level for i in probes.CRITICAL_REFUSED} == {"required"}
    else:  # written by hand for 1.0: the 1.1 checks are skipped
        assert "a 1.0 worker" in checks["describe.capabilities"].detail
        skipped = [checks[i].status for i in ("files", "events", "critical")]
        assert skipped == ["skip"] * 3


def ledger_call(key: str, entry: str, call_id: str) -> ToolCallRequest:
    return ToolCallRequest(
        id=call_id,
        tool=ToolRef(name="ledger_append"),
        arguments={"entry": entry},
        deadline_ms=int((time.time() + 30) * 1000),
        limits=RequestLimits(max_result_bytes=65536),
        context=CallContext(session_id="s1", call_id=call_id, attempt=1, idempotency_key=key),
    )


@pytest.mark.parametrize("language", [*LANGUAGES, NODE_1_1])
def test_ledger_append_writes_once_per_idempotency_key(
    language: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    runner = LocalProcessRunner(local_argv(language, request), env={"LEDGER_FILE": str(ledger)})

    async def calls() -> list:
        first = await runner.call(ledger_call("k-1", "pay 42", "c1"))
        retry = await runner.call(ledger_call("k-1", "pay 42 again", "c2"))
        other = await runner.call(ledger_call("k-2", "pay 7", "c3"))
        return [first, retry, other]

    outcomes = anyio.run(calls)
    contents = [o.result.output.content for o in outcomes]  # type: ignore[union-attr]
    assert [c["appended"] for c in contents] == [True, False, True]
    assert contents[1]["entry"] == "pay 42"  # the retry returns what was written
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert lines == [
        {"idempotency_key": "k-1", "entry": "pay 42"},
        {"idempotency_key": "k-2", "entry": "pay 7"},
    ]


# --- the docs' own worker (issue 24, item 8; docs/workers.md since issue 25) ----------------

WORKERS_PAGE = EXAMPLES.parents[1] / "docs" / "workers.md"
#: The strict checks the page says its shell worker fails, and why (jq's leniency).
README_WORKER_STRICT_FAILURES = {"request.bom.strict", "request.invalid_utf8.strict",
                                 "request.duplicate_keys.strict", "request.nan.strict",
                                 "request.reserved_id"}  # fmt: skip


def readme_section() -> str:
    return blocks.section("docs/workers.md", "### A worker in any language")


def readme_blocks() -> list[str]:
    return blocks.blocks("docs/workers.md", "### A worker in any language")


def test_the_readme_worker_passes_every_required_check(tmp_path: Path) -> None:
    require_program("jq")
    worker, _try_it = readme_blocks()
    assert worker.startswith("#!/bin/sh\n")
    (tmp_path / "worker.sh").write_text(worker, encoding="utf-8")
    report = run_check(local_runner("/bin/sh", str(tmp_path / "worker.sh")),
                       {"echo": {"text": "hi"}})  # fmt: skip
    assert {c.id: c.detail for c in report.failed()} == {}, json.dumps(report.to_dict(), indent=1)
    # exactly what the page says it leaves out, named there with the reason
    assert {c.id for c in report.failed_at("strict")} == README_WORKER_STRICT_FAILURES
    for check in README_WORKER_STRICT_FAILURES:
        assert f"`{check.removesuffix('.strict')}`" in readme_section()


def test_the_readme_try_it_block_runs_as_written() -> None:
    require_program("jq")
    _worker, try_it = readme_blocks()
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", try_it], cwd=WORKERS_PAGE.parents[1],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "all required checks passed" in done.stdout
