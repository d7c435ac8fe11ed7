"""The 1.1 checks: a worker declaring `files` and `events` without keeping to them fails
the hostile-name and event checks; a 1.0 worker gets them skipped and passes as before."""

from __future__ import annotations

import pytest

from runner.conformance import Report, probes
from tests.conformance.conftest import BROKEN, PYTHON, local_runner, run_check
from tests.conformance.test_minimal_worker import perl_argv


@pytest.fixture(scope="module")
def careless(fixtures: dict) -> Report:
    return run_check(local_runner(PYTHON, str(BROKEN / "careless_capable.py")), fixtures)


def test_declared_capabilities_are_read_from_describe_at_1_1(careless: Report) -> None:
    check = careless.by_id()["describe.capabilities"]
    assert (check.status, check.detail) == ("pass", "1.1; capabilities: events, files")


def test_accepting_hostile_file_names_fails_both_levels(careless: Report) -> None:
    checks = careless.by_id()
    assert checks["files.roundtrip"].status == "pass", checks["files.roundtrip"]
    for probe in probes.HOSTILE_FILES:
        if probe == "files.bad_base64":
            continue  # this worker crashes on it: an error exit, good enough for `required`
        assert checks[probe].status == "fail", probe
        assert checks[probe].level == "required"
        assert "answered status ok" in checks[probe].detail
        assert checks[f"{probe}.strict"].status == "fail", probe
    assert checks["files.bad_base64"].status == "pass"
    assert "exited with status 1" in checks["files.bad_base64"].detail
    assert checks["files.bad_base64.strict"].status == "fail"
    assert not careless.ok


def test_bad_event_lines_and_a_flood_fail_the_event_checks(careless: Report) -> None:
    checks = careless.by_id()
    framing, budget = checks["events.framing"], checks["events.budget"]
    assert (framing.status, framing.level) == ("fail", "required")
    assert "unknown member 'colour'" in framing.detail
    assert "over 16384" in framing.detail
    assert budget.status == "fail"
    assert "over max_bytes=4096" in budget.detail
    assert "over max_per_second=10" in budget.detail


def test_a_1_0_worker_gets_the_1_1_checks_skipped(fixtures: dict) -> None:
    report = run_check(local_runner(*perl_argv()), fixtures)
    checks = report.by_id()
    assert checks["describe.capabilities"].status == "pass"
    assert "a 1.0 worker" in checks["describe.capabilities"].detail
    assert checks["files"].status == "skip" and checks["events"].status == "skip"
    assert not [c for c in checks if c.startswith(("files.", "events."))]
    assert report.ok


def test_without_a_fixture_the_file_checks_are_skipped_not_failed() -> None:
    report = run_check(local_runner(PYTHON, str(BROKEN / "careless_capable.py")), {})
    checks = report.by_id()
    assert checks["files"].status == "skip" and "no fixture" in checks["files"].detail
    assert checks["events"].status == "skip"
