"""The engine audits every isolated call by default, to the store its sessions are in,
and the record holds no argument value and no output (a canary in both never reaches
the audit table); AGENTS_RUNNER_AUDIT moves the records to a file or turns them off."""

from __future__ import annotations

import logging
import sys
from dataclasses import replace

import anyio
import pytest
from pydantic import ValidationError

from runner.cli.settings import EngineSettings
from runner.isolation.audit import AuditFailed, AuditQuery, canonical_sha256, read_audit_file
from runner.session import parse_agent, with_durable_workflows
from runner.session.audit import AuditSetting, AuditSettingError, parse_audit
from runner.stores import FileSessionStore, PostgresStore, SQLiteStore, audit_log_of
from tests.conftest import MISBEHAVE, REPO
from tests.session.conftest import agent_doc

ECHO_WORKER = REPO / "examples" / "workers" / "python" / "worker.py"
CANARY = "canary-5d1e77b0-secret"


def isolated_agent(store, **options):
    echo = {"tag": "runIsolated", "spec": {"tag": "localProcess",
            "argv": [sys.executable, str(ECHO_WORKER)]}}  # fmt: skip
    crash = {"tag": "runIsolated", "spec": {"tag": "localProcess",
             "argv": [sys.executable, str(MISBEHAVE), "exit3"]}}  # fmt: skip
    policy = {"rules": [{"match": {"tool": "crash"}, "disposition": crash}], "default": echo}
    responses = [{"tool_calls": [{"id": "a", "name": "echo", "arguments": {"text": CANARY}},
                                 {"id": "b", "name": "crash", "arguments": {"text": CANARY}}]},
                 {"text": "said {{result:a}}"}]  # fmt: skip
    document = agent_doc(responses, ["echo", "crash"], policy)
    single = isinstance(store, FileSessionStore)  # no leases: one process advances it
    agent = with_durable_workflows(parse_agent(document), store, single_process=single)
    return replace(agent, **options) if options else agent


def raw_audit_rows(store) -> bytes:
    """Every byte of every audit row, as the database holds it."""
    query = "SELECT * FROM audit_records"
    if isinstance(store, SQLiteStore):
        rows = store.db.execute(query).fetchall()
    else:
        assert isinstance(store, PostgresStore)
        with store.connection() as db:
            rows = db.execute(query).fetchall()
    return repr(rows).encode()


def test_a_session_run_audits_its_isolated_calls_to_its_store(durable_store):
    report = anyio.run(isolated_agent(durable_store).run, "go")
    assert report.session.final_answer == f"said {CANARY}"  # the canary went through
    by_call = {r.call_id: r for r in audit_log_of(durable_store).audit_records(AuditQuery())}
    assert set(by_call) == {"a", "b"}
    echoed, crashed = by_call["a"], by_call["b"]
    assert echoed.session_id == crashed.session_id == report.session.id
    assert (echoed.tool, echoed.outcome, echoed.runner) == ("echo", "ok", "local")
    assert crashed.outcome == "WORKER_CRASHED" and crashed.output_sha256 is None
    assert echoed.request_id == report.session.calls["a"].token
    assert echoed.arguments_sha256 == canonical_sha256({"text": CANARY})
    rows = raw_audit_rows(durable_store)
    assert b"canary-5d1e77b0" not in rows and echoed.arguments_sha256.encode() in rows


def test_the_file_store_keeps_the_records_of_its_sessions_beside_them(tmp_path):
    store = FileSessionStore(tmp_path / "files")
    report = anyio.run(isolated_agent(store).run, "go")
    path = tmp_path / "files" / "audit.jsonl"
    assert {(r.session_id, r.call_id) for r in read_audit_file(path)} == {
        (report.session.id, "a"), (report.session.id, "b")}  # fmt: skip
    assert b"canary-5d1e77b0" not in path.read_bytes()


def test_auditing_goes_to_a_file_or_nowhere_as_the_setting_says(tmp_path, caplog, monkeypatch):
    store = SQLiteStore(tmp_path / "s.db")
    path = tmp_path / "audit" / "calls.jsonl"
    anyio.run(isolated_agent(store, audit=parse_audit(f"file:{path}")).run, "go")
    assert {r.call_id for r in read_audit_file(path)} == {"a", "b"}
    assert b"canary-5d1e77b0" not in path.read_bytes()
    assert store.audit_records(AuditQuery()) == []
    with caplog.at_level(logging.WARNING, "runner.session.audit"):
        anyio.run(isolated_agent(store, audit=AuditSetting("off")).run, "go")
    assert "auditing is off" in caplog.text
    assert store.audit_records(AuditQuery()) == []
    assert len(list(read_audit_file(path))) == 2


def test_the_environment_sets_the_default(monkeypatch, tmp_path):
    """The commands' settings (runner/cli/settings.py) read the variables; the library
    takes the setting it is given, the store's log by default."""
    monkeypatch.delenv("AGENTS_RUNNER_AUDIT", raising=False)
    monkeypatch.delenv("AGENTS_RUNNER_AUDIT_FAIL", raising=False)
    assert EngineSettings().audit_setting() == AuditSetting("store")
    assert isolated_agent(SQLiteStore(tmp_path / "s.db")).audit == AuditSetting("store")
    monkeypatch.setenv("AGENTS_RUNNER_AUDIT", f"file:{tmp_path}/a.jsonl")
    monkeypatch.setenv("AGENTS_RUNNER_AUDIT_FAIL", "closed")
    expected = AuditSetting("file", tmp_path / "a.jsonl", fail_closed=True)
    assert EngineSettings().audit_setting() == expected
    for bad, why in (("stor", "expected store, file:PATH or off"), ("file:", "needs a path"),
                     ("syslog:x", "expected store, file:PATH or off")):  # fmt: skip
        with pytest.raises(AuditSettingError, match=why):
            parse_audit(bad)
    monkeypatch.setenv("AGENTS_RUNNER_AUDIT_FAIL", "sometimes")
    with pytest.raises(ValidationError, match="expected open or closed"):
        EngineSettings()


def test_fail_closed_stops_the_step_and_the_ledger_settles_the_call_later(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    (tmp_path / "a-file").write_text("")
    unwritable = AuditSetting("file", tmp_path / "a-file" / "audit.jsonl", fail_closed=True)
    agent = isolated_agent(store, audit=unwritable)
    session = agent.start("go")
    with pytest.raises(AuditFailed, match="fail-closed auditing withholds its outcome"):
        anyio.run(agent.resume, session.id)
    assert store.effect(store.load(session.id).calls["a"].idempotency_key).state == "started"
    report = anyio.run(replace(agent, audit=AuditSetting("store")).resume, session.id)
    assert report.session.final_answer == f"said {CANARY}"  # run again: no external effects
    assert {r.call_id for r in store.audit_records(AuditQuery())} == {"a", "b"}
