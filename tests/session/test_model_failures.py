"""Durable model-call failures: a budget stored with the session, spent exactly across
kills, a visible `failed` status, and `session resume --retry`.

The model is a real chat-completions server on 127.0.0.1 (tests/llm's ChatServer) that
counts the requests it gets; the CLI runs in subprocesses that are SIGKILLed between
attempts (by a crash point, or by the test while the process waits at a barrier)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from runner.session import parse_agent, with_durable_workflows
from runner.state import ManualClock
from runner.stores import SQLiteStore
from tests.durability.conftest import wait_for

CLI = [sys.executable, "-m", "runner.cli"]
ANSWER = {"role": "assistant", "content": "the answer is 42"}
ERROR = {"error": {"message": "the model is overloaded"}}


def agent_document(url: str, **retries: int) -> dict:
    return {
        "slug": "flaky",
        # maxRetries would be the provider's own in-memory retries: the engine turns them
        # off, so each attempt of the budget below is exactly one request.
        "provider": {"tag": "openaiCompatible", "baseUrl": url, "model": "m-1", "maxRetries": 5},
        "llmRetries": {"maxAttempts": 4, "backoffMs": 100, "maxBackoffMs": 400, **retries},
    }


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return tmp_path


def run(ws: Path, *args: str, code: int | None = 0, env: dict | None = None,
        ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    done = subprocess.run([*CLI, *args, "--store", str(ws / "s.db")], capture_output=True,
                          text=True, cwd=ws, env=cli_env(env), timeout=120)  # fmt: skip
    if code is not None:
        assert done.returncode == code, done.stderr
    return done


def js(ws: Path, *args: str, code: int = 0) -> dict:
    return json.loads(run(ws, *args, "--json", code=code).stdout)


def cli_env(extra: dict | None = None) -> dict:
    # A killed holder's lease lapses fast, so its successor need not wait long.
    return {**os.environ, "AGENTS_RUNNER_LEASE_SECONDS": "1", **(extra or {})}


def start(ws: Path, document: dict) -> str:
    (ws / "agent.json").write_text(json.dumps(document))
    return js(ws, "session", "start", "--agent-file", "agent.json", "--prompt", "ask")["session_id"]


def stored(ws: Path, session_id: str):
    with SQLiteStore(ws / "s.db") as store:
        return store.load(session_id)


def test_500_three_times_then_an_answer_spends_exactly_the_stored_budget(ws, chat_server):
    for _ in range(3):
        chat_server.reply(ERROR, status=500)
    chat_server.reply(ANSWER)
    sid = start(ws, agent_document(chat_server.url))

    # 1: the first attempt fails; the process dies (SIGKILL) right after storing its backoff.
    died = run(
        ws, "session", "resume", sid, code=None, env={"AGENTS_RUNNER_CRASH_AT": "llm.backoff"}
    )
    assert died.returncode == -signal.SIGKILL
    after = stored(ws, sid)
    assert after.llm_attempts == len(chat_server.requests) == 1
    assert after.status == "running" and after.llm_next_attempt_ms is not None
    assert "HTTP 500" in after.llm_last_error
    shown = js(ws, "session", "show", sid)
    assert shown["llm_attempts"] == 1 and "the last failed" in shown["why"]

    # 2: a new process waits out the stored backoff, makes attempt 2, stores the next
    # backoff and waits at a barrier there, where the test kills it.
    barrier = ws / "barrier"
    barrier.mkdir()
    second = subprocess.Popen([*CLI, "session", "resume", sid, "--store", str(ws / "s.db")],
                              cwd=ws, env=cli_env({"AGENTS_RUNNER_BARRIER_AT":
                                                   f"llm.backoff:{barrier}"}),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    wait_for(lambda: any(barrier.glob("arrived.*")), what="the second process at its backoff")
    second.send_signal(signal.SIGKILL)
    assert second.wait(timeout=30) == -signal.SIGKILL
    assert stored(ws, sid).llm_attempts == len(chat_server.requests) == 2

    # 3: attempt 3 fails, attempt 4 (the budget's last) answers.
    final = js(ws, "session", "resume", sid)
    assert final["status"] == "completed" and final["final_answer"] == "the answer is 42"
    assert len(chat_server.requests) == 4  # no request repeated, none skipped
    done = stored(ws, sid)
    assert done.llm_attempts == 0 and done.llm_next_attempt_ms is None  # reset by the answer


def test_a_model_that_never_recovers_ends_failed_until_resume_retry(ws, chat_server):
    for _ in range(2):
        chat_server.reply(ERROR, status=503)
    sid = start(ws, agent_document(chat_server.url, maxAttempts=2))

    gave_up = run(ws, "session", "resume", sid, "--json", code=1)
    assert json.loads(gave_up.stdout)["status"] == "failed"
    assert "--retry" in gave_up.stderr
    shown = js(ws, "session", "show", sid)
    assert shown["status"] == "failed" and "failed" in shown["conditions"]
    assert "all 2 attempts failed" in shown["failure_reason"] and "HTTP 503" in shown["why"]
    assert "--retry" in shown["why"]
    (listed,) = js(ws, "session", "list", "--status", "failed")["sessions"]
    assert listed["id"] == sid and "HTTP 503" in listed["reason"]
    assert len(chat_server.requests) == 2

    # Nothing advances a failed session by itself: not a plain resume, not a worker.
    refused = run(ws, "session", "resume", sid, code=2)
    assert "give --retry to try again" in refused.stderr
    run(ws, "worker", "--exit-when-idle", "--poll-seconds", "0.05")
    assert stored(ws, sid).status == "failed" and len(chat_server.requests) == 2

    chat_server.reply(ANSWER)  # the model is back
    final = js(ws, "session", "resume", sid, "--retry")
    assert final["status"] == "completed" and final["final_answer"] == "the answer is 42"
    assert len(chat_server.requests) == 3
    assert js(ws, "session", "list", "--status", "failed")["sessions"] == []


def test_malformed_output_fails_at_once_without_burning_the_budget(ws, chat_server):
    chat_server.reply({"role": "assistant", "content": {"not": "a string"}})
    sid = start(ws, agent_document(chat_server.url))
    run(ws, "session", "resume", sid, code=1)
    session = stored(ws, sid)
    assert session.status == "failed" and "not retryable" in session.failure_reason
    assert "malformed chat-completions reply" in session.failure_reason
    assert session.llm_attempts == len(chat_server.requests) == 1  # 1 of 4: no retries


# --- the engine as a library, on a manual clock --------------------------------------


def durable(tmp_path: Path, document: dict, clock: ManualClock):
    store = SQLiteStore(tmp_path / "lib.db")
    return replace(with_durable_workflows(parse_agent(document), store), clock=clock), store


def test_retry_after_is_honoured_and_the_wait_is_on_the_engine_clock(tmp_path, chat_server):
    chat_server.reply(ERROR, status=429, headers={"Retry-After": "7"})
    chat_server.reply(ANSWER)
    clock = ManualClock()
    agent, store = durable(tmp_path, agent_document(chat_server.url, backoffMs=10,
                                                    maxBackoffMs=60_000), clock)  # fmt: skip
    session = agent.start("ask")
    first = anyio.run(agent.step, session.id)
    assert first.action == "llm_retry" and first.status == "running"
    assert first.session.llm_next_attempt_ms == clock.ms + 7000  # the server's 7 s
    report = anyio.run(agent.resume, session.id)
    assert report.status == "completed" and clock.slept == [7.0]
    assert len(chat_server.requests) == 2
    store.close()


def test_a_worker_lets_go_of_a_session_while_its_model_call_backs_off(tmp_path, chat_server):
    chat_server.reply(ERROR, status=500)
    chat_server.reply(ANSWER)
    clock = ManualClock()
    document = agent_document(chat_server.url, backoffMs=3_600_000, maxBackoffMs=3_600_000)
    agent, store = durable(tmp_path, document, clock)
    session = agent.start("ask")
    assert store.due_sessions(10) == [session.id]
    report = anyio.run(agent.work, session.id)
    # It returned without sleeping, the lease is released, and the session is not due
    # until its next attempt (an hour or more away: not due in the store's time).
    assert report.status == "running" and report.action == "llm_retry" and clock.slept == []
    assert store.lease(session.id).owner == ""
    assert store.due_sessions(10) == [] and store.load(session.id).due_ms() == (
        report.session.llm_next_attempt_ms
    )
    assert len(chat_server.requests) == 1
    store.close()


def test_an_interrupted_last_attempt_fails_the_session_without_a_request(tmp_path, chat_server):
    """A process killed mid-request on the last attempt spent it: the next one fails the
    session instead of making a fifth request."""
    clock = ManualClock()
    agent, store = durable(tmp_path, agent_document(chat_server.url, maxAttempts=1), clock)
    session = store.load(agent.start("ask").id)
    session.llm_attempts, session.llm_last_error = 1, None  # as a killed holder leaves it
    store.save(session)
    report = anyio.run(agent.resume, session.id)
    assert report.status == "failed" and "all 1 attempts were used" in (
        report.session.failure_reason
    )
    assert chat_server.requests == []
    store.close()
