"""LocalProcessRunner against real processes: the malformed-output battery, the
environment allow-list, rlimits, the working directory and leftovers."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence

import anyio
import anyio.to_thread
import pytest

from runner.isolation import LocalProcessRunner, ProcessLimits
from tests.conftest import MISBEHAVE, REPO, make_request

pytestmark = pytest.mark.anyio

#: Only catches a hang: every call here ends long before, by its deadline or on its own.
HANG_S = 60


def misbehave(
    mode: str,
    limits: ProcessLimits | None = None,
    env_allow: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> LocalProcessRunner:
    argv = [sys.executable, str(MISBEHAVE), mode]
    return LocalProcessRunner(argv, limits or ProcessLimits(), env_allow, env or {})


# (mode, expected code, seconds of deadline)
BATTERY = [
    ("stdout_flood", "OUTPUT_TOO_LARGE", 30),
    ("stderr_flood", "OUTPUT_TOO_LARGE", 30),
    ("never_exits", "WORKER_TIMEOUT", 1),
    ("ignores_sigterm", "WORKER_TIMEOUT", 1),
    ("grandchild_holds_pipes", None, 30),
    ("empty_exit0", "MALFORMED_OUTPUT", 30),
    ("two_documents", "MALFORMED_OUTPUT", 30),
    ("trailing_garbage", "MALFORMED_OUTPUT", 30),
    ("nan", "MALFORMED_OUTPUT", 30),
    ("huge_number", "MALFORMED_OUTPUT", 30),
    ("wrong_id", "MALFORMED_OUTPUT", 30),
    ("wrong_version", "MALFORMED_OUTPUT", 30),
    ("error_exit0", "MALFORMED_OUTPUT", 30),
    ("ok_exit1", "MALFORMED_OUTPUT", 30),
    ("runner_code", "MALFORMED_OUTPUT", 30),
    ("exit3", "WORKER_CRASHED", 30),
    ("segfault", "WORKER_CRASHED", 30),
    ("tool_error", "TOOL_FAILED", 30),
    ("never_reads", "MALFORMED_OUTPUT", 30),  # answers with id "unknown"
]


@pytest.mark.parametrize(("mode", "code", "deadline"), BATTERY)
async def test_misbehaving_worker_gets_a_typed_outcome(mode, code, deadline):
    with anyio.fail_after(HANG_S):
        outcome = await misbehave(mode).call(make_request(seconds=deadline))
    assert outcome.error_code == code, outcome.result
    assert outcome.result.id == "call-1"
    assert _live_members_of_group(outcome.runner_info["pid"]) == [], "nothing is left running"


async def test_ok_result_and_facts():
    outcome = await misbehave("ok").call(make_request())
    assert outcome.ok and outcome.result.output.content == "fine"
    assert outcome.exit_code == 0 and outcome.signal is None
    assert "a log line" in outcome.stderr_tail
    assert outcome.stdout_bytes > 0 and not outcome.stdout_truncated
    assert outcome.duration_ms > 0


async def test_timeout_is_about_the_deadline_and_reports_the_signal():
    request = make_request(seconds=1.0)
    with anyio.fail_after(HANG_S):
        outcome = await misbehave("never_exits").call(request)
    assert time.time() * 1000 >= request.deadline_ms, "the worker was not stopped early"
    assert outcome.error_code == "WORKER_TIMEOUT" and outcome.result.error.retryable
    assert outcome.signal == 15, "the deadline's SIGTERM ended it"
    assert _live_members_of_group(outcome.runner_info["pid"]) == []


async def test_sigterm_ignored_gets_sigkill_after_grace():
    runner = misbehave("ignores_sigterm", limits=ProcessLimits(term_grace_s=0.5))
    outcome = await runner.call(make_request(seconds=1.0))
    assert outcome.error_code == "WORKER_TIMEOUT" and outcome.signal == 9
    assert "SIGKILL" in outcome.result.error.message
    assert _live_members_of_group(outcome.runner_info["pid"]) == []


async def test_aclose_is_idempotent_and_async_with_closes():
    runner = misbehave("ok")
    async with runner as entered:
        assert entered is runner
        assert (await runner.call(make_request())).ok
    await runner.aclose()
    await runner.aclose()
    # A local runner holds nothing between calls: closing it releases nothing it needs.
    assert (await runner.call(make_request())).ok


async def test_stdout_cap_is_max_result_bytes_and_flags_truncation():
    outcome = await misbehave("stdout_flood").call(make_request(max_result_bytes=1000))
    assert outcome.error_code == "OUTPUT_TOO_LARGE"
    assert outcome.stdout_truncated and outcome.stdout_bytes > 1000


async def test_grandchild_holding_pipes_is_killed_with_its_group():
    outcome = await LocalProcessRunner(
        ["sh", "-c", f"sleep 3600 & exec {sys.executable} {MISBEHAVE} ok"]
    ).call(make_request())
    assert outcome.ok
    # the background sleep was in the worker's process group: it must be gone
    assert _live_members_of_group(outcome.runner_info["pid"]) == []


async def test_deadline_already_passed_never_starts_the_worker(tmp_path):
    marker = tmp_path / "started"
    runner = LocalProcessRunner(["sh", "-c", f"touch {marker}"])
    outcome = await runner.call(make_request(seconds=-1))
    assert outcome.error_code == "WORKER_TIMEOUT"
    assert not marker.exists()
    # the same request fails again, whoever retries it: not retryable, and it says why
    assert outcome.result.error.retryable is False
    assert "deadline_ms (absolute" in outcome.result.error.message


async def test_missing_program_is_start_failure():
    outcome = await LocalProcessRunner(["/nonexistent/worker"]).call(make_request())
    assert outcome.error_code == "WORKER_START_FAILED"
    assert "/nonexistent/worker" in outcome.result.error.message


async def test_environment_is_an_allow_list(monkeypatch):
    monkeypatch.setenv("AGENTS_RUNNER_CANARY", "secret-canary")
    monkeypatch.setenv("PASSED_THROUGH", "yes")
    runner = misbehave("env", env_allow=["PASSED_THROUGH"], env={"EXPLICIT": "1"})
    outcome = await runner.call(make_request())
    env = outcome.result.output.content
    assert "AGENTS_RUNNER_CANARY" not in env
    assert env["PASSED_THROUGH"] == "yes" and env["EXPLICIT"] == "1"
    assert set(env) <= {"PATH", "LANG", "TZ", "HOME", "TMPDIR", "PASSED_THROUGH", "EXPLICIT",
                        "LC_CTYPE"}  # fmt: skip


async def test_fresh_working_directory_is_removed_afterwards():
    first = (await _shell_stdout("pwd; ls -A | wc -l; touch left-behind", ProcessLimits())).split()
    second = (await _shell_stdout("pwd", ProcessLimits())).split()
    workdir, entries = first
    assert entries == "0", "the working directory starts empty"
    assert workdir != second[0], "each call gets its own directory"
    assert not await anyio.Path(workdir).exists(), "the working directory is removed afterwards"


async def test_rlimits_apply_in_the_worker():
    script = "ulimit -c; ulimit -n; ulimit -f; ulimit -v"
    out = await _shell_stdout(script, ProcessLimits(open_files=64, file_size_bytes=1024 * 1024,
                                                    address_space_bytes=1024**3))  # fmt: skip
    core, nofile, fsize_blocks, as_kib = out.split()
    assert core == "0" and nofile == "64"
    assert int(fsize_blocks) * 1024 == 1024 * 1024  # bash reports 1024-byte blocks
    assert int(as_kib) == 1024 * 1024


async def test_relative_program_path_is_resolved(monkeypatch):
    monkeypatch.chdir(REPO)
    relative = await anyio.to_thread.run_sync(os.path.relpath, sys.executable)
    runner = LocalProcessRunner([relative, str(MISBEHAVE), "ok"])
    assert (await runner.call(make_request())).ok


async def test_many_concurrent_calls_leave_no_process():
    async def one(results: list) -> None:
        results.append(await misbehave("ok").call(make_request()))

    results: list = []
    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(one, results)
    assert len(results) == 8 and all(r.ok for r in results)


async def test_cancelling_the_caller_kills_the_worker():
    with anyio.move_on_after(0.5) as scope:
        await misbehave("never_exits").call(make_request(seconds=60))
    assert scope.cancelled_caught
    leftovers = [p for p in os.listdir("/proc") if _cmdline(p).endswith("never_exits")]
    assert leftovers == []


def _live_members_of_group(pgid: int) -> list[str]:
    """Processes of group `pgid` that are not zombies (a killed orphan may briefly be one
    until init reaps it)."""
    members = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(pid)
    return members


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


async def _shell_stdout(script: str, limits: ProcessLimits) -> str:
    """Run `script` under `limits`; the shell prints to stderr so the envelope is not
    needed: the runner reports MALFORMED_OUTPUT and keeps stderr's tail."""
    runner = LocalProcessRunner(["bash", "-c", f"({script}) >&2"], limits)
    outcome = await runner.call(make_request())
    return outcome.stderr_tail


async def test_request_over_the_cap_is_refused_without_starting_a_worker(tmp_path):
    marker = tmp_path / "started"
    runner = LocalProcessRunner(["sh", "-c", f"touch {marker}"])
    huge = make_request(arguments={"blob": "x" * (17 * 1024 * 1024)})
    outcome = await runner.call(huge)
    assert outcome.error_code == "INVALID_REQUEST"
    assert "over the cap" in outcome.result.error.message
    assert not marker.exists()
