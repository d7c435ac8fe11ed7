"""Section 5's retryable column is binding (issue 34, item 3): the runner replaces a
worker's `retryable` by the column's value, so a worker cannot get INVALID_ARGUMENTS or
INTERNAL retried, and the outcome says which side produced an error."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from envelopes.v1 import CODE_RETRYABLE, ERROR_CODES, RUNNER_CODE_RETRYABLE, binding_retryable
from runner.isolation.local import LocalProcessRunner
from runner.session import execute
from tests.conftest import make_request

#: Answers with the code and `retryable` of its argv, and counts its runs in a file.
WORKER = """
import json, sys
code, retryable, count = sys.argv[1], sys.argv[2] == "true", sys.argv[3]
request = json.loads(sys.stdin.buffer.read())
if request["kind"] == "DescribeRequest":  # no describe: a 1.0 worker, no capabilities
    sys.exit(2)
with open(count, "a") as f:
    f.write("x")
error = {"code": code, "message": "as told", "retryable": retryable}
sys.stdout.write(json.dumps({"kind": "ToolCallResult", "version": request["version"],
                             "id": request["id"], "status": "error", "error": error}))
sys.exit(1)
"""


@pytest.fixture
def worker(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    return script, tmp_path / "count"


def test_the_table_is_the_single_source_and_covers_every_code() -> None:
    assert set(CODE_RETRYABLE) == set(ERROR_CODES)
    assert [code for code, value in CODE_RETRYABLE.items() if value is None] == ["TOOL_FAILED"]
    assert all(RUNNER_CODE_RETRYABLE[c] is CODE_RETRYABLE[c] for c in RUNNER_CODE_RETRYABLE)
    assert {c for c, v in CODE_RETRYABLE.items() if v is False} == execute.NEVER_RETRIED


@pytest.mark.parametrize(
    ("code", "sent", "expected"),
    [
        ("INVALID_ARGUMENTS", True, False),
        ("INTERNAL", True, False),
        ("LIMIT_EXCEEDED", True, False),
        ("DEADLINE_EXCEEDED", False, True),
        ("UNAVAILABLE", False, True),
        ("TOOL_FAILED", True, True),  # the one code where the worker decides
        ("TOOL_FAILED", False, False),
    ],
)
def test_the_runner_normalizes_a_workers_retryable(
    worker: tuple[Path, Path], code: str, sent: bool, expected: bool
) -> None:
    script, count = worker
    runner = LocalProcessRunner([sys.executable, str(script), code, str(sent).lower(), str(count)])
    outcome = anyio.run(runner.call, make_request("t"))
    assert outcome.result.error is not None
    assert (outcome.result.error.code, outcome.result.error.retryable) == (code, expected)
    assert outcome.error_source == "worker"
    assert outcome.to_dict()["error_source"] == "worker"
    assert binding_retryable(code, sent) is expected


def test_a_runner_produced_error_says_so(worker: tuple[Path, Path]) -> None:
    script, count = worker
    # A runner-only code from the worker: the runner's MALFORMED_OUTPUT, the runner's error.
    runner = LocalProcessRunner([sys.executable, str(script), "WORKER_OOM", "true", str(count)])
    outcome = anyio.run(runner.call, make_request("t"))
    assert outcome.error_code == "MALFORMED_OUTPUT" and outcome.error_source == "runner"
