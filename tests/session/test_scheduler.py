"""step / resume / complete_calls over a real SQLite store."""

from __future__ import annotations

import sys

import anyio
import pytest

from runner.session import SessionError, ToolResult, UnknownToken
from runner.stores import SQLiteStore, VersionConflict
from tests.conftest import MISBEHAVE
from tests.session.conftest import FINAL, Counter, agent_doc, calls

DEFER = {"tag": "defer", "reason": "outside"}
POLICY = {"default": {"tag": "runSync"},
          "rules": [{"match": {"tool": "remote"}, "disposition": DEFER}]}  # fmt: skip


def waiting_session(durable):
    doc = agent_doc([calls(("a", "echo"), ("b", "remote")), FINAL], ["echo", "remote"], POLICY)
    agent = durable(doc)
    report = anyio.run(agent.run, "go")
    assert report.status == "waiting"
    return agent, report.session


def test_step_by_step_the_turns_advance(durable):
    doc = agent_doc([calls(("a", "echo")), FINAL], ["echo"])
    agent = durable(doc)
    session = agent.start("go")
    kinds = []
    while (report := anyio.run(agent.step, session.id)).status == "running":
        kinds.append(report.action)
    assert kinds == ["llm_turn", "ran_calls"]
    assert report.status == "completed" and report.action == "llm_turn"
    stored = agent.store.load(session.id)  # a report holds the session's recent part
    assert [t.kind for t in stored.turns] == ["user", "llm", "user", "llm"]


def test_complete_calls_is_idempotent_and_refuses_unknown_tokens(durable):
    agent, session = waiting_session(durable)
    token = session.calls["b"].token
    with pytest.raises(UnknownToken):
        anyio.run(
            agent.complete_calls,
            session.id,
            [(token, ToolResult.ok(1)), ("nope", ToolResult.ok(2))],
        )
    assert agent.store.load(session.id).calls["b"].state == "deferred"  # nothing applied
    first = anyio.run(agent.complete_calls, session.id, [(token, ToolResult.ok("R"))])
    assert first.applied == (token,) and first.session.status == "running"
    again = anyio.run(agent.complete_calls, session.id, [(token, ToolResult.ok("R"))])
    assert again.applied == () and again.already_completed == (token,)
    other = anyio.run(agent.complete_calls, session.id, [(token, ToolResult.ok("other"))])
    assert other.applied == () and other.conflicting == (token,)
    assert agent.store.load(session.id).calls["b"].result.content == "R"
    final = anyio.run(agent.resume, session.id)
    assert final.status == "completed" and final.session.final_answer == "done: {} R"


def test_resume_twice_from_the_same_stored_state_gives_the_same_result(durable, store, tmp_path):
    agent, session = waiting_session(durable)
    anyio.run(
        agent.complete_calls, session.id, [(session.calls["b"].token, ToolResult.ok({"n": 1}))]
    )
    copy_path = tmp_path / "copy.db"
    store.db.execute(f"VACUUM INTO '{copy_path}'")
    one = anyio.run(agent.resume, session.id).session
    copy = SQLiteStore(copy_path)
    two = anyio.run(type(agent)(agent.agent, copy).resume, session.id).session
    assert one.final_answer == two.final_answer
    assert one.final_answer.startswith("done: ")
    assert [t.model_dump() for t in one.turns] == [t.model_dump() for t in two.turns]


def test_a_stale_write_gets_a_conflict_not_a_lost_update(durable, store):
    agent, session = waiting_session(durable)
    stale = store.load(session.id)
    anyio.run(agent.complete_calls, session.id, [(session.calls["b"].token, ToolResult.ok("x"))])
    stale.status = "cancelled"
    with pytest.raises(VersionConflict):
        store.save(stale)
    assert store.load(session.id).calls["b"].state == "completed"


def test_runner_errors_become_failed_calls_the_model_sees(durable):
    isolated = {"tag": "runIsolated", "spec": {"tag": "localProcess",
                "argv": [sys.executable, str(MISBEHAVE), "exit3"]}}  # fmt: skip
    doc = agent_doc([calls(("a", "w")), {"text": "saw: {{result:a}}"}], ["w"],
                    {"default": isolated})  # fmt: skip
    report = anyio.run(durable(doc).run, "go")
    call = report.session.calls["a"]
    assert call.state == "failed" and call.result.error_code == "WORKER_CRASHED"
    assert report.session.final_answer.startswith("saw: [error WORKER_CRASHED]")


def test_bash_and_external_tools_never_run_in_process(durable):
    doc = agent_doc([calls(("a", "bash")), {"text": "{{result:a}}"}], [])
    doc["tools"] = [{"name": "bash", "kind": "bash"}]
    report = anyio.run(durable(doc).run, "go")
    assert report.session.calls["a"].result.error_code == "PERMISSION_DENIED"


def test_unknown_tools_fail_without_running(durable):
    report = anyio.run(durable(agent_doc([calls(("a", "ghost")), FINAL], [])).run, "go")
    assert report.session.calls["a"].result.error_code == "UNKNOWN_TOOL"
    assert report.status == "completed"


def test_max_concurrency_bounds_parallel_calls(durable, registry):
    running, peak = 0, 0

    @registry.register("test_parallel")
    async def parallel(arguments: dict) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.05)
        running -= 1
        return "ok"

    ids = [(f"c{i}", "test_parallel") for i in range(6)]
    doc = agent_doc([calls(*ids), {"text": "fin"}], ["test_parallel"],
                    {"default": {"tag": "runAsync"}}, maxConcurrency=2)  # fmt: skip
    report = anyio.run(durable(doc).run, "go")
    assert report.status == "completed" and peak == 2


def test_yield_on_any_progress_returns_unfinished_calls_to_ready(durable, registry):
    @registry.register("test_wait")
    async def wait(arguments: dict) -> str:
        await anyio.sleep(arguments["s"])
        return "ok"

    doc = agent_doc([{"tool_calls": [{"id": "fast", "name": "test_wait", "arguments": {"s": 0}},
                                     {"id": "slow", "name": "test_wait", "arguments": {"s": 30}}]},
                     {"text": "fin"}], ["test_wait"], {"default": {"tag": "runAsync"}},
                    executionMode="asynchronous",
                    asyncYieldStrategy="yieldOnAnyProgress")  # fmt: skip
    agent = durable(doc)
    session = agent.start("go")
    anyio.run(agent.step, session.id)
    report = anyio.run(agent.step, session.id)
    assert report.ran == ("fast",)
    assert report.session.calls["slow"].state == "ready"
    assert report.status == "running"


def test_yield_on_timeout_and_synchronous_mode_waits(durable, registry):
    Counter(registry, "test_quick")
    doc = agent_doc([calls(("a", "test_quick")), {"text": "fin"}], ["test_quick"],
                    {"default": {"tag": "runAsync"}}, executionMode="asynchronous",
                    asyncYieldStrategy={"tag": "yieldOnTimeout", "milliseconds": 0})  # fmt: skip
    agent = durable(doc)
    session = agent.start("go")
    anyio.run(agent.step, session.id)
    report = anyio.run(agent.step, session.id)
    assert report.ran == () and report.session.calls["a"].state == "ready"
    sync = durable({**doc, "executionMode": "synchronous"})
    assert anyio.run(sync.resume, session.id).status == "completed"


def test_freeze_cancel_and_detached_isolated_calls(durable):
    detached = {"tag": "runIsolated", "attached": False, "spec": {"tag": "localProcess",
                "argv": [sys.executable, str(MISBEHAVE), "ok"]}}  # fmt: skip
    doc = agent_doc([calls(("a", "w"), ("b", "remote")), FINAL], ["w", "remote"],
                    {"default": detached, "rules": POLICY["rules"]})  # fmt: skip
    agent = durable(doc)
    report = anyio.run(agent.run, "go")
    assert report.status == "waiting" and report.session.calls["a"].state == "ready"
    assert {c["tool_call_id"] for c in report.to_dict()["deferred_calls"]} == {"a", "b"}
    after = anyio.run(agent.run_isolated, report.session.id)
    assert after.session.calls["a"].state == "completed" and after.status == "waiting"
    assert agent.freeze(report.session.id).status == "frozen"
    with pytest.raises(SessionError, match="is frozen; `session resume` continues it"):
        anyio.run(agent.step, report.session.id)
    cancelled = agent.cancel(report.session.id)
    assert cancelled.status == "cancelled" and cancelled.calls["b"].state == "cancelled"
