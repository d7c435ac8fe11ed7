"""What an agent iteration costs the store, and that the cheaper path keeps its promises:
two commits per iteration of an in-process call (the answer; the results with the next
request's attempt counted), more for a call a worker gets; the LLM request built from
the kept messages is the one built from the whole history; the history is read once per
DurableAgent, not once per request."""

from __future__ import annotations

import sys
from dataclasses import replace

import anyio
import pytest

from runner.llm import LLMRequest, LLMResponse, ScriptedLLM
from runner.session import parse_agent, with_durable_workflows
from runner.session.prompt import llm_request
from runner.stores import SQLiteStore, VersionConflict
from tests.session.conftest import agent_doc, calls


def echo_script(iterations: int) -> list[dict]:
    steps = [calls((f"e{i}", "echo"), text=f"step {i}") for i in range(iterations)]
    return [*steps, {"text": "done {{result:e0}}"}]


class Watching:
    """A scripted LLM that, at each request, notes what the store holds and checks the
    request against one built from the whole stored history."""

    def __init__(self, store: SQLiteStore, responses: list[dict], agent_document: dict) -> None:
        self.store, self.inner = store, ScriptedLLM(responses)
        self.agent = parse_agent(agent_document)
        self.session_id = ""
        self.stored_attempts: list[int] = []
        self.mismatches = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        stored = self.store.load(self.session_id)
        self.stored_attempts.append(stored.llm_attempts)
        if request != llm_request(self.agent, stored):
            self.mismatches += 1
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def watched(store: SQLiteStore, iterations: int, **extra) -> tuple:
    document = agent_doc(echo_script(iterations), ["echo"], **extra)
    llm = Watching(store, document["provider"]["responses"], document)
    agent = replace(with_durable_workflows(parse_agent(document), store), llm=llm)
    session = agent.start("go")
    llm.session_id = session.id
    return agent, llm, session.id


def test_an_in_process_iteration_is_two_commits_and_counts_the_attempt_first(store):
    agent, llm, sid = watched(store, 12)
    before = store.commits
    report = anyio.run(agent.resume, sid)
    assert report.status == "completed" and report.session.final_answer == 'done {"text": "step 0"}'
    # 12 iterations and the answer, in one resume: its lease (taken, released), the
    # first request's attempt, 2 per iteration, the answer.
    assert store.commits - before == 2 + 1 + 2 * 12 + 1
    # Every request was counted in the store before it was sent, once.
    assert llm.stored_attempts == [1] * 13
    assert llm.mismatches == 0
    assert store.load(sid).llm_attempts == 0  # reset by the answer


def test_a_step_alone_counts_its_own_attempt_so_none_is_spent_unused(store):
    agent, llm, sid = watched(store, 2)
    assert anyio.run(agent.step, sid).action == "llm_turn"
    assert anyio.run(agent.step, sid).action == "ran_calls"
    # No step follows in this operation: the next request's attempt is not counted yet.
    assert store.load(sid).llm_attempts == 0
    while anyio.run(agent.step, sid).status == "running":
        pass
    assert llm.stored_attempts == [1, 1, 1] and llm.mismatches == 0


def test_a_resume_that_stops_at_its_step_limit_leaves_no_attempt_counted(store):
    agent, llm, sid = watched(store, 40)  # more than one resume's 64 steps
    first = anyio.run(agent.resume, sid)
    assert first.status == "running" and first.action == "ran_calls"
    assert store.load(sid).llm_attempts == 0
    assert anyio.run(agent.resume, sid).status == "completed"
    assert llm.stored_attempts == [1] * 41 and llm.mismatches == 0


def test_an_isolated_call_is_stored_running_and_counted_before_its_worker_starts(store, tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(
        "import json, sys\nr = json.loads(sys.stdin.read())\n"
        "print(json.dumps({'kind': 'ToolCallResult', 'version': '1.0', 'id': r['id'],"
        " 'status': 'ok', 'output': {'type': 'text', 'content': 'ok'}}))\n"
    )
    spec = {"tag": "localProcess", "argv": [sys.executable, str(worker)]}
    policy = {"default": {"tag": "runIsolated", "spec": spec}}
    document = agent_doc([calls(("c", "echo")), {"text": "done"}], ["echo"], policy)
    agent = with_durable_workflows(parse_agent(document), store)
    sid = agent.start("go").id
    before = store.commits
    assert anyio.run(agent.resume, sid).status == "completed"
    # The lease (2), the first attempt, the answer, the results, the final answer (4),
    # and for the worker: stored running, the attempt counted, the ledger's requested,
    # started and completed rows (5), and its audit record (1).
    assert store.commits - before == 2 + 4 + 5 + 1


def test_a_request_is_built_from_kept_messages_and_the_history_is_read_once(store, monkeypatch):
    reads = []
    with_history = store.with_history
    monkeypatch.setattr(store, "with_history", lambda s: reads.append(s.id) or with_history(s))
    agent, llm, sid = watched(store, 40)
    while anyio.run(agent.resume, sid).status == "running":
        pass
    assert reads == [] and llm.mismatches == 0  # this agent sent every turn itself
    # A new DurableAgent (another process, say) keeps nothing: it reads the history once.
    agent, llm, sid2 = watched(store, 40)
    anyio.run(agent.resume, sid2)
    fresh = replace(with_durable_workflows(agent.agent, store), llm=llm)
    while anyio.run(fresh.resume, sid2).status == "running":
        pass
    assert reads == [sid2] and llm.mismatches == 0


class Overtaken(Watching):
    """At its second request, someone else commits the session first."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if len(self.stored_attempts) == 1:
            self.store.save(self.store.load(self.session_id))
        return await super().complete(request)


def test_a_refused_commit_keeps_no_messages_of_its_answer(store):
    """A holder whose answer is not stored must not make later requests claim it."""
    document = agent_doc(echo_script(3), ["echo"])
    llm = Overtaken(store, document["provider"]["responses"], document)
    agent = replace(with_durable_workflows(parse_agent(document), store), llm=llm)
    llm.session_id = sid = agent.start("go").id
    with pytest.raises(VersionConflict):
        anyio.run(agent.resume, sid)
    kept = agent.conversations.prompt(store.load(sid, history=False))
    # Kept: turns 0 and 1 (the prompt, the first answer); not the refused second answer.
    assert kept is not None and kept.start == 2 and len(kept.request.messages) == 3
    assert anyio.run(agent.resume, sid).status == "completed" and llm.mismatches == 0


def test_an_invalid_parameters_schema_fails_the_call_by_name(durable):
    document = agent_doc([calls(("c", "echo")), {"text": "{{result:c}}"}], ["echo"])
    document["tools"][0]["parameters"] = {"type": "object", "properties": {"text": {"type": 5}}}
    report = anyio.run(durable(document).run, "go")
    call = report.session.calls["c"]
    assert call.state == "failed" and call.result.error_code == "INVALID_REQUEST"
    assert "parameters schema of 'echo' is not valid: properties/text/type:" in call.result.content
