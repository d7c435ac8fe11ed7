"""`agents-runner worker-check` as a user runs it: a table or JSON, and the exit status."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conformance.conftest import BROKEN, EXAMPLES, FIXTURES, PYTHON
from tests.conftest import REPO

CLI = [sys.executable, "-m", "runner.cli", "worker-check"]


def worker_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=REPO, timeout=300)


def test_a_conforming_worker_gets_a_table_and_exit_0() -> None:
    done = worker_check("--runner", "local", "--fixture", str(FIXTURES), "--",
                        PYTHON, str(EXAMPLES / "python" / "worker.py"))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "describe.valid" in done.stdout and "PASS" in done.stdout
    assert "all required checks passed" in done.stdout


def test_a_failing_worker_gets_json_with_the_failed_ids_and_exit_1() -> None:
    done = worker_check("--runner", "local", "--json", "--fixture", str(FIXTURES), "--",
                        PYTHON, str(BROKEN / "ignores_version.py"))  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert report["failed"][:3] == ["version.2.0", "version.0.9", "version.1.999"]
    assert {i.split(".")[0] for i in report["failed"][3:]} == {"critical"}  # read as 1.0
    # Version rules it also breaks, at strict: "1.01" and "2" read as 1.0.
    strict = {"version.leading_zero.strict", "version.major_only.strict", "version.refusal"}
    assert report["failed_by_level"]["required"] == report["failed"]
    assert set(report["failed_by_level"]["strict"]) == strict  # probes run concurrently
    assert {c["level"] for c in report["checks"]} == {"required", "strict", "advisory"}
    assert {c["id"] for c in report["checks"]} >= {"describe.valid", "stdout.pure", "exit_code"}


def test_bad_input_is_one_line_and_exit_2(tmp_path) -> None:
    bad = tmp_path / "fixture.json"
    bad.write_text('{"echo": "not an object"}')
    for args, message in [
        (["--runner", "local", "--fixture", str(bad), "--", "true"], "must be an object"),
        (
            ["--runner", "local", "--fixture", str(tmp_path / "nope.json"), "--", "true"],
            "cannot read",
        ),
        (["--runner", "docker"], "--image"),
        (["--runner", "local", "--probe-timeout", "0", "--", "true"], "--probe-timeout"),
        (["--runner", "local", "--fixture-json", "[1]", "--", "true"], "expected an object"),
        (["--runner", "local", "--fixture-json", "{", "--", "true"], "is not JSON"),
        (
            ["--runner", "local", "--fixture", str(bad), "--fixture-json", "{}", "--", "true"],
            "not both",
        ),
    ]:
        done = worker_check(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
