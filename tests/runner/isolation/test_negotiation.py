"""Envelope 1.1 negotiation through LocalProcessRunner: what describe says, what is
cached, what each worker is sent; and 1.0 workers (the four examples as they are) see
exactly the bytes they saw before 1.1."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from envelopes import codec
from envelopes.v1 import ToolCallRequest
from runner.isolation import CapabilityCache, LocalProcessRunner, WorkerEvent
from tests.conformance.conftest import EXAMPLES, PYTHON, engine, go_binary, require_program
from tests.conftest import WORKERS, make_request

pytestmark = pytest.mark.anyio

EVENTS_WORKER = WORKERS / "events_worker.py"
__all__ = ["engine", "go_binary"]  # fixtures the Go example needs


def recorded(path: Path) -> list[dict]:
    """The requests a worker read, in order (each line written by --record)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def worker(record: Path, *args: str, **kwargs) -> LocalProcessRunner:
    argv = [sys.executable, str(EVENTS_WORKER), f"--record={record}", *args]
    return LocalProcessRunner(argv, **kwargs)


def with_files(
    request: ToolCallRequest, *files: dict, collect: dict | None = None
) -> ToolCallRequest:
    doc = request.to_wire()
    doc["version"] = "1.1"
    doc["files"] = list(files)
    if collect is not None:
        doc["collect"] = collect
    return ToolCallRequest.model_validate(doc)


async def test_a_1_1_worker_declares_its_capabilities_once_per_runner(tmp_path: Path):
    record = tmp_path / "seen.jsonl"
    runner = worker(record)
    assert await runner.capabilities() == {"files", "events"}
    assert await runner.capabilities() == {"files", "events"}
    await runner.call(make_request("run"), lambda e: None)
    kinds = [(r["kind"], r["version"]) for r in recorded(record)]
    assert kinds == [("DescribeRequest", "1.1"), ("ToolCallRequest", "1.1")]
    assert recorded(record)[-1]["events"] == {"max_per_second": 20, "max_bytes": 1048576}


async def test_a_1_0_worker_is_asked_again_at_1_0_and_has_no_capabilities(tmp_path: Path):
    record = tmp_path / "seen.jsonl"
    runner = worker(record, "--v10")
    assert await runner.capabilities() == frozenset()
    outcome = await runner.call(make_request("run"), lambda e: None)
    assert outcome.ok and outcome.result.version == "1.0"
    kinds = [(r["kind"], r["version"]) for r in recorded(record)]
    assert kinds == [("DescribeRequest", "1.1"), ("DescribeRequest", "1.0"),
                     ("ToolCallRequest", "1.0")]  # fmt: skip
    assert "events" not in recorded(record)[-1]


async def test_runners_made_per_call_describe_one_worker_once_between_them(tmp_path: Path):
    # Sessions build a LocalProcessRunner per call: without a shared answer a 1.0 worker
    # would be described twice before every call.
    script = tmp_path / "worker.py"
    script.write_text(EVENTS_WORKER.read_text())
    record = tmp_path / "seen.jsonl"

    shared = CapabilityCache()  # what the session's engine keeps for its runners

    def fresh() -> LocalProcessRunner:
        argv = [sys.executable, str(script), f"--record={record}", "--v10"]
        return LocalProcessRunner(argv, capability_cache=shared)

    for _ in range(3):
        assert (await fresh().call(make_request("run"), lambda e: None)).ok
    kinds = [r["kind"] for r in recorded(record)]
    assert kinds == ["DescribeRequest", "DescribeRequest", *["ToolCallRequest"] * 3]
    script.write_text(script.read_text() + "\n# edited: the worker may have changed\n")
    assert (await fresh().call(make_request("run"), lambda e: None)).ok
    assert [r["kind"] for r in recorded(record)][5:] == [
        "DescribeRequest", "DescribeRequest", "ToolCallRequest"]  # fmt: skip


async def test_calls_that_start_together_wait_for_one_describe(tmp_path: Path):
    record = tmp_path / "seen.jsonl"
    outcomes = []
    shared = CapabilityCache()

    async def one() -> None:
        runner = worker(record, "--v10", capability_cache=shared)
        outcomes.append(await runner.call(make_request("run"), lambda e: None))

    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(one)
    assert all(o.ok for o in outcomes) and len(outcomes) == 6
    kinds = [r["kind"] for r in recorded(record)]
    assert kinds.count("DescribeRequest") == 2 and kinds.count("ToolCallRequest") == 6


async def test_explicit_capabilities_skip_describe(tmp_path: Path):
    record = tmp_path / "seen.jsonl"
    runner = worker(record, capabilities=frozenset({"events"}))
    assert await runner.capabilities() == {"events"}
    await runner.call(make_request("run"), lambda e: None)
    assert [r["kind"] for r in recorded(record)] == ["ToolCallRequest"]


async def test_events_go_only_to_a_worker_declaring_them(tmp_path: Path):
    record = tmp_path / "seen.jsonl"
    runner = worker(record, "--caps=files", "lines", "1", "0")
    received: list[WorkerEvent] = []
    request = make_request("run")
    outcome = await runner.call(request, received.append)
    assert outcome.ok and received == [] and outcome.events == ()
    sent = recorded(record)[-1]
    assert "events" not in sent and sent["version"] == "1.0"  # nothing 1.1 left to send


async def test_files_to_a_worker_without_the_capability_are_refused_before_it_starts(
    tmp_path: Path,
):
    record = tmp_path / "seen.jsonl"
    runner = worker(record, "--caps=events")
    request = with_files(make_request("run"), {"path": "in.txt", "content": "x"})
    outcome = await runner.call(request)
    assert outcome.error_code == "INVALID_REQUEST"
    assert outcome.result.error is not None
    assert "does not declare the `files` capability" in outcome.result.error.message
    assert outcome.runner_info == {"started": False}
    assert [r["kind"] for r in recorded(record)] == ["DescribeRequest"]  # no call started
    collect_only = with_files(make_request("run"), collect={"patterns": ["*.png"]})
    assert (await runner.call(collect_only)).error_code == "INVALID_REQUEST"


async def test_a_worker_whose_describe_fails_gets_no_files_and_says_why(tmp_path: Path):
    runner = LocalProcessRunner([sys.executable, "-c", "import sys; sys.exit(3)"])
    request = with_files(make_request("run"), {"path": "in.txt", "content": "x"})
    outcome = await runner.call(request)
    assert outcome.error_code == "INVALID_REQUEST"
    assert outcome.result.error is not None
    assert "its describe failed: WORKER_CRASHED" in outcome.result.error.message


async def test_the_agents_exe_envelope_has_no_capabilities():
    runner = LocalProcessRunner([sys.executable, str(EVENTS_WORKER)], envelope="agents-exe")
    assert await runner.capabilities() == frozenset()
    request = with_files(make_request("run"), {"path": "in.txt", "content": "x"})
    assert (await runner.call(request)).error_code == "INVALID_REQUEST"


async def test_without_events_or_files_nothing_is_negotiated(tmp_path: Path):
    record = tmp_path / "seen.jsonl"
    request = make_request("run")
    outcome = await worker(record).call(request)
    assert outcome.ok
    assert [r["kind"] for r in recorded(record)] == ["ToolCallRequest"]


# --- the four example workers, as they are --------------------------------------------


def example_argv(language: str, request: pytest.FixtureRequest) -> list[str]:
    if language == "bash":
        require_program("jq")
        return ["/bin/bash", str(EXAMPLES / "bash" / "worker.sh")]
    if language == "python":
        return [PYTHON, str(EXAMPLES / "python" / "worker.py")]
    if language == "node":
        return [require_program("node"), str(EXAMPLES / "node" / "worker.js")]
    return [str(request.getfixturevalue("go_binary"))]


def stdin_documents(path: Path) -> list[bytes]:
    """What a worker read on its stdin, call by call (tee appends them back to back)."""
    data, documents, decoder, index = path.read_text(), [], json.JSONDecoder(), 0
    while index < len(data):
        _, end = decoder.raw_decode(data, index)
        documents.append(data[index:end].encode())
        index = end
    return documents


@pytest.mark.parametrize("language", ["bash", "python", "node", "go"])
async def test_a_1_0_example_sees_the_bytes_it_saw_before_1_1(
    language: str, request: pytest.FixtureRequest, tmp_path: Path
):
    """Each example worker, asked for events: one that declares no capabilities (a 1.0
    worker) is sent the very bytes of the 1.0 request; one on the 1.1 SDK gets events."""
    stdin_copy = tmp_path / "stdin"
    tee = ["/bin/sh", "-c", 'tee -a "$0" | "$@"', str(stdin_copy), *example_argv(language, request)]
    runner = LocalProcessRunner(tee)
    call = make_request("echo", {"text": "hello"})
    with anyio.fail_after(60):
        capabilities = await runner.capabilities()
        outcome = await runner.call(call, lambda e: None)
    assert outcome.ok, outcome.result
    sent = stdin_documents(stdin_copy)[-1]
    if "events" not in capabilities:
        assert sent == codec.encode(call)
        assert outcome.result.version == "1.0" and outcome.events == ()
    else:
        assert json.loads(sent)["version"] == "1.1" and "events" in json.loads(sent)
