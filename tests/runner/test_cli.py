"""The `agents-runner` command in a real subprocess: outputs, exit statuses, and one-line
errors for bad input (never a traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from envelopes import codec
from tests.conftest import MISBEHAVE, REPO, make_request

CLI = [sys.executable, "-m", "runner.cli"]


def agents_runner(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, cwd=REPO, timeout=60)


def local(mode: str, *options: str) -> list[str]:
    return ["isolate", "--runner", "local", *options, "--", sys.executable, str(MISBEHAVE), mode]


def test_isolate_local_prints_the_result_and_exits_0():
    done = agents_runner(*local("ok"), stdin=codec.encode(make_request()))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "ok"


def test_isolate_error_result_exits_1_and_json_gives_the_outcome():
    done = agents_runner(*local("exit3", "--json"), stdin=codec.encode(make_request()))
    assert done.returncode == 1
    outcome = json.loads(done.stdout)
    assert outcome["result"]["error"]["code"] == "WORKER_CRASHED"
    assert outcome["exit_code"] == 3 and "duration_ms" in outcome


def test_timeout_option_replaces_the_deadline():
    started = time.monotonic()
    done = agents_runner(*local("never_exits", "--timeout", "1"),
                         stdin=codec.encode(make_request(seconds=600)))  # fmt: skip
    assert json.loads(done.stdout)["error"]["code"] == "WORKER_TIMEOUT"
    assert time.monotonic() - started < 8


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (local("ok"), b"", "empty input"),
        (local("ok"), b'{"kind": "ToolCallRequest"', "invalid JSON at line 1"),
        (local("ok"), b'{"kind":"ToolCallRequest","version":"1.0","id":"x"}', "tool"),
        (local("ok"), b'{"kind":"ToolCallRequest","version":"3.0"}', "not supported"),
        (["isolate", "--runner", "docker"], b"{}", "--image"),
        (["isolate", "--runner", "local"], b"{}", "argv"),
        (["isolate", "--runner", "podman", "--", "x"], b"{}", "'local' or 'docker'"),
        (local("ok", "--cpus", "2"), b"{}", "--cpus applies to --runner docker only"),
        (["isolate", "--runner", "docker", "--image", "x", "--memory", "lots"], b"{}", "--memory"),
        (local("ok", "--request", "/nonexistent.json"), b"", "cannot read /nonexistent.json"),
    ],
)
def test_bad_input_gets_one_clear_line(args, stdin, message):
    done = agents_runner(*args, stdin=stdin)
    assert done.returncode == 2
    err = done.stderr.decode()
    assert message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_describe_local():
    done = agents_runner("describe", "--runner", "local", "--env", f"PYTHONPATH={REPO}", "--",
                         sys.executable, str(REPO / "images/bash-runner/worker.py"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tools"][0]["name"] == "bash"
