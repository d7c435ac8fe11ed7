"""examples/workers/minimal/: a worker written from the spec in Perl with JSON::PP's
ordinary decoder, as a new author would, passes every `required` check and fails exactly
the `strict` checks its lenient parsing and field checks miss: `worker-check` exits 0
without --strict and 1 with it."""

from __future__ import annotations

import json
import subprocess

import pytest

from runner.conformance import Report
from tests.conformance.conftest import EXAMPLES, FIXTURES, local_runner, require_program, run_check
from tests.conformance.test_cli import worker_check

WORKER = EXAMPLES / "minimal" / "worker.pl"
#: What JSON::PP and the worker's own checks let through, each answered with an error
#: (so never `ok`) but not INVALID_REQUEST: duplicate keys (JSON::PP keeps the last one),
#: a 2 MiB id and a missing `limits` (the worker checks neither); and the id it read from
#: duplicate keys, echoed where an unreadable request's answer carries the reserved "-".
STRICT_FAILURES = {
    "request.duplicate_keys.strict",
    "request.reserved_id",
    "request.huge_string.strict",
    "request.missing_field.strict",
}


def perl_argv() -> list[str]:
    perl = require_program("perl")
    if subprocess.run([perl, "-MJSON::PP", "-e1"], capture_output=True).returncode != 0:
        pytest.fail("perl's core JSON::PP module is missing (Debian: apt-get install perl)")
    return [perl, str(WORKER)]


@pytest.fixture(scope="module")
def report(fixtures: dict) -> Report:
    return run_check(local_runner(*perl_argv()), fixtures)


def test_it_passes_every_required_check(report: Report) -> None:
    assert report.failed() == [], json.dumps(report.to_dict(), indent=1)
    assert report.ok
    checks = report.by_id()
    for check_id in ("call.echo", "echo.echo", "limit.echo", "stdout.pure", "exit_code"):
        assert checks[check_id].status == "pass", checks[check_id]


def test_it_fails_the_strict_checks_its_lenient_parser_misses(report: Report) -> None:
    assert {c.id for c in report.failed(strict=True)} == STRICT_FAILURES
    assert not report.strict_ok
    checks = report.by_id()
    # The same probes pass at the required level: refused, promptly, never `ok`.
    for check_id in STRICT_FAILURES - {"request.reserved_id"}:
        required = checks[check_id.removesuffix(".strict")]
        assert (required.status, required.level) == ("pass", "required"), required
        assert checks[check_id].level == "strict"
    assert "UNKNOWN_TOOL" in checks["request.duplicate_keys.strict"].detail
    assert checks["request.reserved_id"].level == "strict"
    assert "request.duplicate_keys: 'wc-malformed'" in checks["request.reserved_id"].detail
    # What JSON::PP itself refuses passes strict too.
    for probe in ("bom", "invalid_utf8", "nan", "lone_surrogate", "deep_nesting"):
        assert checks[f"request.{probe}.strict"].status == "pass", probe


def test_the_exit_status_follows_required_unless_strict() -> None:
    argv = ["--runner", "local", "--fixture", str(FIXTURES), "--json", "--", *perl_argv()]
    lenient = worker_check(*argv)
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    document = json.loads(lenient.stdout)
    assert (document["ok"], document["strict"], document["strict_ok"]) == (True, False, False)
    assert document["failed"] == []
    assert set(document["failed_by_level"]["strict"]) == STRICT_FAILURES

    strict = worker_check("--strict", *argv)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    document = json.loads(strict.stdout)
    assert (document["ok"], document["strict"]) == (False, True)
    assert set(document["failed"]) == STRICT_FAILURES
    levels = {c["id"]: c["level"] for c in document["checks"]}
    assert levels["request.duplicate_keys"] == "required"
    assert levels["request.duplicate_keys.strict"] == "strict"
    assert levels["output.controls"] == "advisory"


def test_the_table_shows_levels_and_what_strict_would_fail() -> None:
    done = worker_check("--runner", "local", "--fixture", str(FIXTURES), "--", *perl_argv())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "level" in done.stdout and "strict" in done.stdout and "advisory" in done.stdout
    assert "4 strict check(s) failed (counted with --strict)" in done.stdout
    assert "all required checks passed" in done.stdout
