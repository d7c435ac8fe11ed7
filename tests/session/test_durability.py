"""Durable waits, versioned resume and the ledger's say over interrupted calls, on each
durable engine (`store` here is tests/conftest.py's `durable_store`: sqlite, postgres)."""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest

from runner.session import SessionError, ToolResult
from runner.state import SESSION_SCHEMA_VERSION as VERSION
from runner.state import ManualClock
from runner.stores.base import DurableStore, Effect
from tests.session.conftest import FINAL, agent_doc, calls


@pytest.fixture
def store(durable_store: DurableStore) -> DurableStore:
    """Overrides tests/session/conftest.py's SQLite-only store (and so `durable`)."""
    return durable_store


SOON = {"tag": "defer", "reason": "r", "expiresAfterSeconds": 60}
EXPIRING = {"default": {"tag": "runSync"},
            "rules": [{"match": {"tool": "remote"}, "disposition": SOON}]}  # fmt: skip


def test_an_expired_deferred_call_is_named_for_the_model_and_late_results_do_not_revive(
    durable, store
):
    clock = ManualClock()
    agent = durable(agent_doc([calls(("a", "remote")), {"text": "saw {{result:a}}"}],
                              ["remote"], EXPIRING), clock=clock)  # fmt: skip
    report = anyio.run(agent.run, "go")
    assert report.status == "waiting"
    token = report.session.calls["a"].token
    clock.advance(59.9)
    assert anyio.run(agent.resume, report.session.id).session.calls["a"].state == "deferred"
    clock.advance(0.1)  # its minute is up
    final = anyio.run(agent.resume, report.session.id)
    assert final.session.calls["a"].state == "expired"
    assert final.session.final_answer.startswith(
        "saw [expired EXPIRED] no result arrived within 60s"
    )
    late = anyio.run(agent.complete_calls, report.session.id, [(token, ToolResult.ok("too late"))])
    assert late.late == (token,) and late.applied == ()
    assert store.load(report.session.id).calls["a"].state == "expired"
    assert store.late_results(report.session.id)[0][1].content == "too late"


def test_an_older_session_schema_needs_migrate(durable, store):
    agent = durable(agent_doc([calls(("a", "remote")), FINAL], ["remote"], EXPIRING))
    session = agent.start("go")
    session.schema_version = 1
    store.save(session)
    with pytest.raises(SessionError, match=f"session schema 1; this program uses {VERSION}"):
        anyio.run(agent.step, session.id)
    anyio.run(replace(agent, migrate=True).step, session.id)
    assert store.load(session.id).schema_version == VERSION


def test_an_interrupted_external_call_becomes_unknown_outcome_not_a_rerun(durable, store):
    import sys

    from tests.conftest import MISBEHAVE

    isolated = {"tag": "runIsolated", "spec": {"tag": "localProcess",
                "argv": [sys.executable, str(MISBEHAVE), "ok"]}}  # fmt: skip
    doc = agent_doc([calls(("a", "w")), FINAL], ["w"], {"default": isolated})
    doc["tools"][0]["effects"] = "external"
    agent = durable(doc)
    session = agent.start("go")
    anyio.run(agent.step, session.id)
    left = store.load(session.id)  # as a runner that died mid-call left it
    left.calls["a"].state, left.calls["a"].attempts = "running", 1
    store.save(left)
    store.record_effect(Effect(left.calls["a"].idempotency_key, session.id, "a", 1,
                               "external", "started", None))  # fmt: skip
    report = anyio.run(agent.resume, session.id)
    assert report.status == "waiting" and report.session.calls["a"].state == "unknown_outcome"
    with pytest.raises(SessionError, match="--force"):
        anyio.run(agent.retry, session.id, left.calls["a"].token)
