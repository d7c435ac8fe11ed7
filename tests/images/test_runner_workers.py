"""The bash-runner and python-runner workers speak 1.1, run as local processes (the
Docker runs of the same checks are in tests/docker/test_runner_images_1_1.py): input
files in the call's workspace (the script's working directory), `collect` as media parts
with a path, the script's lines streamed as RS-framed `log` events while it runs, and
1.0 requests answered as before. The worker is run directly, its stdout and stderr read
here, so these checks do not depend on a runner's parsing."""

from __future__ import annotations

import base64
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from envelopes import events, wire
from tests.conftest import REPO

Launch = Callable[[str], list[str]]


class Running:
    """A worker process given one request; stderr lines arrive on a queue as read."""

    def __init__(
        self, argv: Sequence[str], request: dict[str, Any], env: dict[str, str] | None
    ) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)  # fmt: skip
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr: list[bytes] = []
        threading.Thread(target=self._read_stderr, daemon=True).start()
        assert self.proc.stdin is not None
        self.proc.stdin.write(wire.dumps(request))
        self.proc.stdin.close()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def next_event(self, timeout: float = 60) -> dict[str, Any] | None:
        """The next event line on stderr (plain lines are kept), None at its end."""
        while True:
            line = self.lines.get(timeout=timeout)  # a hang guard, not a timing
            if line is None:
                return None
            self.stderr.append(line)
            if line.startswith(b"\x1e"):
                parsed = events.parse_line(line)
                assert isinstance(parsed, dict), (parsed, line)
                return parsed

    def finish(self) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
        """The result document, every event, and the exit status."""
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        status = self.proc.wait(timeout=120)
        seen = []
        while (event := self.next_event()) is not None:
            seen.append(event)
        return wire.loads(out, max_bytes=len(out) + 1), seen, status


def request(tool: str, arguments: dict[str, Any], seconds: float = 60, **newer: Any) -> dict:
    doc = {
        "kind": "ToolCallRequest",
        "version": "1.1" if newer else "1.0",
        "id": "call-1",
        "tool": {"name": tool},
        "arguments": arguments,
        "deadline_ms": int((time.time() + seconds) * 1000),
        "limits": {"max_result_bytes": 1 << 20},
    }
    return doc | newer


def streamed(seen: list[dict[str, Any]], stream: str) -> list[str]:
    """The lines of `stream` as the log events carried them (coalesced lines split)."""
    return [line for e in seen if e["type"] == "log" and e["stream"] == stream
            for line in e["text"].split("\n")]  # fmt: skip


# --- the checks, for any way of starting the worker ----------------------------------

SCRIPT = """
cat data/in.csv
pwd
stat -c %a bin/run.sh
sh bin/run.sh  # not ./bin/run.sh: Docker's /tmp is noexec
echo to stderr >&2
mkdir -p out/deep
tr a-z A-Z < data/in.csv > out/upper.csv
printf '\\x89PNG' > out/deep/chart.png
ln -s /etc/passwd out/leak.csv
"""


def check_bash_files_collect_and_events(start: Callable[[dict], Running], base: str) -> None:
    doc = request(
        "bash",
        {"script": SCRIPT},
        files=[
            {"path": "data/in.csv", "content": "a,b\n1,2\n"},
            {
                "path": "bin/run.sh",
                "content": base64.b64encode(b"#!/bin/sh\necho ran\n").decode(),
                "encoding": "base64",
                "mode": 0o755,
            },
        ],
        collect={"patterns": ["out/**"]},
        events={"max_per_second": 50},
    )
    result, seen, status = start(doc).finish()
    assert status == 0 and result["status"] == "ok", result
    assert result["version"] == "1.1"
    own, *media, skipped = result["output"]["parts"]
    stdout = own["content"]["stdout"].split("\n")
    assert stdout[:2] == ["a,b", "1,2"] and stdout[3:5] == ["755", "ran"]
    workspace = stdout[2]
    assert os.path.dirname(workspace) == base
    assert os.path.basename(workspace).startswith("agents-runner-ws-")
    assert [(m["path"], m.get("filename"), m["mime_type"], base64.b64decode(m["base64_data"]))
            for m in media] == [
        ("out/deep/chart.png", "chart.png", "image/png", b"\x89PNG"),
        ("out/upper.csv", "upper.csv", "text/csv", b"A,B\n1,2\n"),
    ]  # fmt: skip
    leak = "skipped: out/leak.csv: a symbolic link (not followed)"
    assert skipped == {"type": "text", "content": leak}
    assert streamed(seen, "stdout") == stdout[:-1]  # the full stdout ends with LF
    assert streamed(seen, "stderr") == ["to stderr"]
    assert own["content"]["stderr"] == "to stderr\n"


WAIT_SCRIPT = 'echo first; until [ -e "${TMPDIR:-/tmp}/go" ]; do sleep 0.05; done; echo second'


def check_lines_stream_while_the_script_runs(
    start: Callable[[dict], Running], release: Callable[[], None]
) -> None:
    """The first line arrives as an event while the script still waits for `release()`
    (so it cannot have come from the end of the call), then the call ends normally."""
    running = start(request("bash", {"script": WAIT_SCRIPT}, seconds=300, events={}))
    assert running.next_event() == {"type": "log", "stream": "stdout", "text": "first"}
    assert running.proc.poll() is None, "the event came only when the worker ended"
    release()
    result, seen, status = running.finish()
    assert status == 0 and result["output"]["content"]["stdout"] == "first\nsecond\n"
    assert streamed(seen, "stdout") == ["second"]


def check_a_killed_call_streamed_first(start: Callable[[dict], Running]) -> None:
    doc = request("bash", {"script": "echo before the kill; sleep 120"}, seconds=2, events={})
    result, seen, status = start(doc).finish()
    assert status == 1 and result["error"]["code"] == "DEADLINE_EXCEEDED", result
    assert streamed(seen, "stdout") == ["before the kill"]


def check_python_runner(start: Callable[[dict], Running]) -> None:
    code = "import sys\nprint(open('in.txt').read().strip())\nopen('out.json', 'w').write('[1]')"
    doc = request("python", {"code": code}, files=[{"path": "in.txt", "content": "hello\n"}],
                  collect={"patterns": ["*.json"]}, events={})  # fmt: skip
    result, seen, status = start(doc).finish()
    assert status == 0, result
    own, media = result["output"]["parts"]
    assert own["content"]["stdout"] == "hello\n"
    assert media == {"type": "media", "mime_type": "application/json", "base64_data": "WzFd",
                     "filename": "out.json", "path": "out.json"}  # fmt: skip
    assert streamed(seen, "stdout") == ["hello"]


def check_1_0_is_unchanged(start: Callable[[dict], Running]) -> None:
    result, seen, status = start(request("bash", {"script": "echo hi; echo err >&2"})).finish()
    assert status == 0 and seen == []
    assert result == {"kind": "ToolCallResult", "version": "1.0", "id": "call-1", "status": "ok",
                      "output": {"type": "json", "content": {
                          "exit_code": 0, "stdout": "hi\n", "stderr": "err\n", "stdout_bytes": 3,
                          "stderr_bytes": 4, "truncated": False}}}  # fmt: skip


def check_describe(start: Callable[[dict], Running]) -> None:
    for version, capabilities in (("1.1", ["files", "events"]), ("1.0", None)):
        result, _, status = start({"kind": "DescribeRequest", "version": version}).finish()
        assert status == 0 and result["version"] == version
        assert result.get("capabilities") == capabilities
        assert result["supported_versions"] == ["1.0", "1.1"]


# --- as local processes --------------------------------------------------------------


@pytest.fixture
def local(tmp_path: Path) -> Callable[[str], Callable[[dict], Running]]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": str(tmp_path),
           "PYTHONPATH": str(REPO)}  # fmt: skip

    def starter(image: str) -> Callable[[dict], Running]:
        argv = [sys.executable, str(REPO / "images" / image / "worker.py")]
        return lambda doc: Running(argv, doc, env)

    return starter


def test_bash_runner_files_collect_and_events(local, tmp_path: Path) -> None:
    check_bash_files_collect_and_events(local("bash-runner"), str(tmp_path))
    assert list(tmp_path.iterdir()) == [], "the workspace is removed afterwards"


def test_bash_runner_streams_lines_while_the_script_runs(local, tmp_path: Path) -> None:
    check_lines_stream_while_the_script_runs(local("bash-runner"), (tmp_path / "go").touch)


def test_bash_runner_streamed_what_a_killed_call_printed(local) -> None:
    check_a_killed_call_streamed_first(local("bash-runner"))


def test_python_runner_files_collect_and_events(local) -> None:
    check_python_runner(local("python-runner"))


@pytest.mark.parametrize("image", ["bash-runner", "python-runner"])
def test_describe_declares_1_1_capabilities(local, image: str) -> None:
    check_describe(local(image))


def test_a_1_0_call_is_answered_as_before(local) -> None:
    check_1_0_is_unchanged(local("bash-runner"))
