"""worker-check fails three workers broken on purpose, with the right check ids, and
finishes even when the worker hangs."""

from __future__ import annotations

import time

import pytest

from runner.conformance import Report
from tests.conformance.conftest import BROKEN, PYTHON, local_runner, run_check

#: Short: the hanging worker costs this per probe; answers come far sooner.
PROBE_TIMEOUT_S = 4.0


def check_broken(name: str, fixtures: dict) -> Report:
    return run_check(local_runner(PYTHON, str(BROKEN / f"{name}.py")), fixtures, PROBE_TIMEOUT_S)


def test_logs_on_stdout_fail_stdout_pure(fixtures: dict) -> None:
    report = check_broken("logs_on_stdout", fixtures)
    checks = report.by_id()
    assert not report.ok
    assert checks["stdout.pure"].status == "fail"
    assert (
        "trailing data" in checks["stdout.pure"].detail
        or "invalid JSON" in checks["stdout.pure"].detail
    )
    assert checks["describe.valid"].status == "fail"


def test_ignoring_the_version_fails_the_version_checks(fixtures: dict) -> None:
    report = check_broken("ignores_version", fixtures)
    # Read as 1.0, a 1.1 request's `critical` is ignored (must-ignore): the critical
    # probes catch it too.
    critical = {"critical.unknown", "critical.unknown_extension", "critical.absent",
                "critical.duplicate"}  # fmt: skip
    assert {c.id for c in report.failed()} == {"version.2.0", "version.0.9", "version.1.999",
                                               *critical}  # fmt: skip
    assert "expected UNSUPPORTED_VERSION, got status ok" in report.by_id()["version.2.0"].detail


def test_hanging_on_bad_input_fails_the_malformed_probes_and_still_finishes(fixtures: dict) -> None:
    started = time.monotonic()
    report = check_broken("hangs_on_bad_input", fixtures)
    elapsed = time.monotonic() - started
    checks = report.by_id()
    for probe in ("request.empty", "request.truncated", "request.invalid_utf8"):
        assert checks[probe].status == "fail"
        assert "no answer within" in checks[probe].detail
    assert checks["call.echo"].status == "pass"
    # Every probe has a deadline: ten hanging probes, four at a time, cost a few timeouts.
    assert elapsed < 10 * PROBE_TIMEOUT_S


@pytest.mark.parametrize("name", ["logs_on_stdout", "ignores_version", "hangs_on_bad_input"])
def test_broken_workers_leave_no_process_behind(name: str) -> None:
    import subprocess

    left = subprocess.run(["pgrep", "-f", str(BROKEN / f"{name}.py")], capture_output=True)
    assert left.stdout == b""


def test_control_characters_in_output_are_a_warning(fixtures: dict) -> None:
    from tests.conformance.conftest import EXAMPLES

    fixtures = {**fixtures, "echo": {"text": "\x1b[2J\u202eevil"}}
    report = run_check(local_runner(PYTHON, str(EXAMPLES / "python" / "worker.py")), fixtures)
    checks = report.by_id()
    assert checks["output.controls"].status == "warn"
    assert "call.echo" in checks["output.controls"].detail
    assert report.ok  # a warning, not a failure
