"""The audit trail at the isolation layer: AuditedRunner over real local workers, the
JSON-lines file (0600, append-only, symlinks refused, two processes at once), reading
it back, and a record that cannot be written (logged, or failing the call)."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
import time

import anyio
import pytest

from envelopes.v1 import MAX_REQUEST_BYTES, CallContext, ToolCallRequest
from runner.isolation import (
    AuditedRunner,
    AuditError,
    AuditFailed,
    AuditQuery,
    AuditRecord,
    JsonLinesAuditSink,
    LocalProcessRunner,
)
from runner.isolation.audit import canonical_sha256, ms_to_iso, read_audit_file, select
from tests.conftest import MISBEHAVE, REPO, make_request

pytestmark = pytest.mark.anyio

ECHO_WORKER = REPO / "examples" / "workers" / "python" / "worker.py"
CANARY = "canary-7f3c9a1e-do-not-log"


def echo_runner() -> LocalProcessRunner:
    return LocalProcessRunner([sys.executable, str(ECHO_WORKER)])


def misbehave(mode: str) -> LocalProcessRunner:
    return LocalProcessRunner([sys.executable, str(MISBEHAVE), mode])


def with_context(request: ToolCallRequest, session_id: str = "s-1", call_id: str = "c-1"):
    context = CallContext(session_id=session_id, call_id=call_id, attempt=1,
                          idempotency_key=f"{session_id}:{call_id}")  # fmt: skip
    return request.model_copy(update={"context": context})


def records(path) -> list[AuditRecord]:
    return list(read_audit_file(path))


async def test_an_ok_call_is_recorded_with_sizes_and_hashes_never_values(tmp_path):
    path = tmp_path / "audit.jsonl"
    request = with_context(make_request("echo", {"text": CANARY}))
    outcome = await AuditedRunner(echo_runner(), JsonLinesAuditSink(path)).call(request)
    assert outcome.ok and outcome.result.output.content == CANARY  # the worker saw it
    [record] = records(path)
    assert (record.session_id, record.call_id, record.request_id) == ("s-1", "c-1", "call-1")
    assert (record.tool, record.runner, record.outcome) == ("echo", "local", "ok")
    assert record.runtime == "process" and record.network == {"mode": "host"}
    assert record.arguments_sha256 == canonical_sha256({"text": CANARY})
    assert record.output_sha256 == canonical_sha256(outcome.result.output.to_wire())
    assert record.bytes_in == len(echo_runner().dialect.encode(request))
    assert record.bytes_out == outcome.stdout_bytes > len(CANARY)
    assert record.duration_ms == round(outcome.duration_ms, 3)
    assert abs(record.at_ms - time.time() * 1000) < 600_000  # now, in UTC
    assert CANARY.encode() not in path.read_bytes()


@pytest.mark.parametrize(("mode", "seconds", "code"), [
    ("tool_error", 30, "TOOL_FAILED"),
    ("never_exits", 1, "WORKER_TIMEOUT"),
    ("exit3", 30, "WORKER_CRASHED"),
])  # fmt: skip
async def test_failed_calls_are_recorded_with_their_error_code(tmp_path, mode, seconds, code):
    path = tmp_path / "audit.jsonl"
    request = make_request("bash", {"script": CANARY}, seconds=seconds)
    outcome = await AuditedRunner(misbehave(mode), JsonLinesAuditSink(path)).call(request)
    assert outcome.error_code == code
    [record] = records(path)
    assert record.outcome == code and record.output_sha256 is None
    assert record.session_id is None  # a bare request has no context
    assert CANARY.encode() not in path.read_bytes()


async def test_a_call_refused_before_any_worker_starts_is_recorded_too(tmp_path):
    path = tmp_path / "audit.jsonl"
    request = make_request("bash", {"script": "x" * MAX_REQUEST_BYTES})  # over the cap
    outcome = await AuditedRunner(misbehave("ok"), JsonLinesAuditSink(path)).call(request)
    assert outcome.runner_info == {"started": False}
    [record] = records(path)
    assert (record.outcome, record.runner) == ("INVALID_REQUEST", "local")
    assert record.bytes_in > MAX_REQUEST_BYTES and record.bytes_out == 0


async def test_a_cancelled_call_is_recorded_as_cancelled(tmp_path):
    path = tmp_path / "audit.jsonl"
    audited = AuditedRunner(misbehave("never_exits"), JsonLinesAuditSink(path))
    with anyio.move_on_after(1):  # the caller gives up before the worker's deadline
        await audited.call(make_request(seconds=60))
    [record] = records(path)
    assert record.outcome == "CANCELLED"


async def test_a_record_that_cannot_be_written_is_logged_whole(tmp_path, caplog):
    path = tmp_path / "audit.jsonl"
    sink = JsonLinesAuditSink(path)
    (tmp_path / "elsewhere").write_text("")
    path.symlink_to(tmp_path / "elsewhere")  # swapped in after the sink was made
    with caplog.at_level(logging.ERROR, "runner.isolation.audit"):
        outcome = await AuditedRunner(echo_runner(), sink).call(
            make_request("echo", {"text": CANARY})
        )
    assert outcome.ok  # fail open: the call's outcome is kept
    [line] = [r.getMessage() for r in caplog.records]
    assert "AUDIT RECORD NOT WRITTEN" in line and "symbolic link" in line
    logged = AuditRecord.from_json(line[line.index("the record: ") + len("the record: ") :])
    assert logged.tool == "echo" and logged.outcome == "ok"
    assert CANARY not in line
    assert (tmp_path / "elsewhere").read_text() == ""  # nothing written through the link


async def test_fail_closed_withholds_the_outcome_of_an_unrecorded_call(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    sink = JsonLinesAuditSink(blocker / "audit.jsonl")
    audited = AuditedRunner(echo_runner(), sink, fail_closed=True)
    with pytest.raises(AuditFailed, match="could not be written"):
        await audited.call(make_request("echo", {"text": "x"}))


def test_a_symlinked_path_is_refused_when_the_sink_is_made(tmp_path):
    (tmp_path / "target").write_text("")
    (tmp_path / "audit.jsonl").symlink_to(tmp_path / "target")
    with pytest.raises(AuditError, match="symbolic link"):
        JsonLinesAuditSink(tmp_path / "audit.jsonl")


def record(n: int, at_ms: int | None = None, **fields) -> AuditRecord:
    values = {"at": ms_to_iso(at_ms if at_ms is not None else 1_700_000_000_000 + n),
              "request_id": f"r{n}", "tool": "bash", "runner": "local", "outcome": "ok",
              "duration_ms": 1.0, "bytes_in": 10, "bytes_out": 20,
              "arguments_sha256": "0" * 64, **fields}  # fmt: skip
    return AuditRecord(**values)


def test_the_file_is_created_0600_and_only_ever_appended_to(tmp_path):
    path = tmp_path / "logs" / "audit.jsonl"
    sink = JsonLinesAuditSink(path)
    sink.append(record(1))
    first = path.read_bytes()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    sink.append(record(2))
    assert path.read_bytes().startswith(first)
    assert [r.request_id for r in records(path)] == ["r1", "r2"]


def test_two_processes_appending_at_once_lose_and_mix_no_line(tmp_path):
    """Lines longer than a pipe's atomic write (4 KiB), from two processes at once."""
    path = tmp_path / "audit.jsonl"
    script = textwrap.dedent(f"""
        import sys
        from runner.isolation.audit import AuditRecord, JsonLinesAuditSink
        sink = JsonLinesAuditSink({str(path)!r})
        denied = [{{"at_ms": i, "kind": "connect", "host": "h" * 40, "port": 443}}
                  for i in range(100)]
        for n in range(200):
            sink.append(AuditRecord(at="2026-01-01T00:00:00.000Z", tool="t", runner="local",
                        request_id=f"{{sys.argv[1]}}-{{n}}", outcome="ok", duration_ms=0,
                        bytes_in=0, bytes_out=0, arguments_sha256="0" * 64,
                        egress_denied=denied))
    """)  # fmt: skip
    writers = [subprocess.Popen([sys.executable, "-c", script, name], cwd=REPO)
               for name in ("a", "b")]  # fmt: skip
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    lines = path.read_bytes().splitlines()
    assert len(lines) == 400 and all(len(line) > 4096 for line in lines)
    ids = {AuditRecord.from_json(line).request_id for line in lines}
    assert ids == {f"{name}-{n}" for name in ("a", "b") for n in range(200)}


def test_a_corrupt_line_is_named_by_number(tmp_path):
    path = tmp_path / "audit.jsonl"
    JsonLinesAuditSink(path).append(record(1))
    with path.open("a") as handle:
        handle.write('{"v": 1, "at": "yesterday"}\n')
    with pytest.raises(AuditError, match=r"audit.jsonl:2: not an audit record"):
        records(path)
    path.write_text(record(1).to_json().replace("2023-11-14", "2023-13-14") + "\n")
    with pytest.raises(AuditError, match=r"audit.jsonl:1: bad time"):
        records(path)


def test_select_filters_and_keeps_the_newest_oldest_first():
    found = [record(3, session_id="s1"), record(1, session_id="s1", tool="python"),
             record(2, session_id="s2", outcome="WORKER_TIMEOUT"),
             record(4, session_id="s1")]  # fmt: skip

    def ids(query: AuditQuery) -> list[str]:
        return [r.request_id for r in select(found, query)]

    assert ids(AuditQuery()) == ["r1", "r2", "r3", "r4"]
    assert ids(AuditQuery(limit=2)) == ["r3", "r4"]
    assert ids(AuditQuery(session_id="s1")) == ["r1", "r3", "r4"]
    assert ids(AuditQuery(tool="python")) == ["r1"]
    assert ids(AuditQuery(outcome="WORKER_TIMEOUT")) == ["r2"]
    start = 1_700_000_000_000
    assert ids(AuditQuery(since_ms=start + 2, until_ms=start + 4)) == ["r2", "r3"]


def test_records_escape_what_a_terminal_would_act_on(tmp_path):
    path = tmp_path / "audit.jsonl"
    JsonLinesAuditSink(path).append(record(1, image="evil\x1b[2J\u202e"))
    raw = path.read_bytes()
    assert b"\x1b" not in raw and raw.isascii()
    assert records(path)[0].image == "evil\x1b[2J\u202e"


def test_a_record_holds_exactly_the_documented_fields():
    assert list(json.loads(record(1).to_json())) == [
        "v", "at", "session_id", "call_id", "request_id", "tool", "runner", "image",
        "image_id", "runtime", "limits", "network", "outcome", "duration_ms", "bytes_in",
        "bytes_out", "arguments_sha256", "output_sha256", "egress_denied",
        "egress_denied_count",
    ]  # fmt: skip


def test_the_umask_cannot_widen_the_file(tmp_path):
    old = os.umask(0)
    try:
        JsonLinesAuditSink(tmp_path / "a.jsonl").append(record(1))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.jsonl").stat().st_mode) == 0o600
