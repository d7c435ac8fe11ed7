"""The retry decorator follows section 5's binding retryable column (envelopes.v1.
CODE_RETRYABLE), not the worker's flag: a real local worker counts its runs."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from envelopes.v1 import CODE_RETRYABLE
from tests.security.test_retry_binding import WORKER
from tests.session.conftest import FINAL, agent_doc, calls


@pytest.fixture
def worker(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    return script, tmp_path / "count"


@pytest.mark.parametrize(("code", "runs"), [("INTERNAL", 1), ("INVALID_ARGUMENTS", 1),
                                            ("UNAVAILABLE", 3)])  # fmt: skip
def test_the_retry_decorator_follows_the_column_not_the_worker(
    durable, worker: tuple[Path, Path], code: str, runs: int
) -> None:
    script, count = worker
    # UNAVAILABLE marked not retryable by the worker is retried; the others, marked
    # retryable, are not.
    sent = "false" if CODE_RETRYABLE[code] else "true"
    isolated = {"tag": "runIsolated", "spec": {"tag": "localProcess",
                "argv": [sys.executable, str(script), code, sent, str(count)]}}  # fmt: skip
    policy = {"tag": "decorate", "inner": isolated,
              "decorators": [{"tag": "retries", "count": 2, "backoffMs": 1}]}  # fmt: skip
    doc = agent_doc([calls(("a", "w")), FINAL], ["w"], {"default": policy})
    report = anyio.run(durable(doc).run, "go")
    call = report.session.calls["a"]
    assert call.result.error_code == code
    assert count.read_text() == "x" * runs and call.attempts == runs
