"""The engine states what it needs of a store and checks it when it is made: a store that
cannot fence is refused for anything that advances sessions concurrently, by name; a
composite keeps exactly its primary's guarantees."""

from __future__ import annotations

import anyio
import pytest

from runner.session import StoreCapabilityError, parse_agent, with_durable_workflows
from runner.stores import (
    CompositeStore,
    DurableCompositeStore,
    DurableStore,
    FencedOut,
    FileSessionStore,
    SQLiteStore,
)
from tests.session.conftest import FINAL, agent_doc, calls

DOC = agent_doc([calls(("a", "echo")), FINAL], ["echo"])


def test_a_file_store_is_refused_naming_what_it_lacks(tmp_path):
    files = FileSessionStore(tmp_path / "files")
    with pytest.raises(StoreCapabilityError, match=r"leases with fencing tokens and an effect"
                       r" ledger; the file store .* \(FileSessionStore\)"):  # fmt: skip
        with_durable_workflows(parse_agent(DOC), files)


def test_a_file_store_serves_one_process_when_asked_to(tmp_path):
    files = FileSessionStore(tmp_path / "files")
    agent = with_durable_workflows(parse_agent(DOC), files, single_process=True)
    report = anyio.run(agent.run, "go")
    assert report.status == "completed" and files.load(report.session.id).status == "completed"
    with pytest.raises(StoreCapabilityError, match="this operation needs"):
        anyio.run(agent.work, report.session.id)  # a worker is never single-process


def test_a_composite_is_as_durable_as_its_primary(tmp_path):
    sqlite, files = SQLiteStore(tmp_path / "s.db"), FileSessionStore(tmp_path / "files")
    durable = CompositeStore(sqlite, files)
    assert isinstance(durable, DurableCompositeStore) and isinstance(durable, DurableStore)
    plain = CompositeStore(files, sqlite)
    assert not isinstance(plain, DurableStore)
    with pytest.raises(StoreCapabilityError, match=r"file store .* in front of SQLite store"):
        with_durable_workflows(parse_agent(DOC), plain)


def test_a_session_adopted_from_a_fallback_is_fenced_in_the_primary(tmp_path):
    files = FileSessionStore(tmp_path / "files")
    old = with_durable_workflows(parse_agent(DOC), files, single_process=True)
    session = old.start("go")  # lives only in the file store
    composite = CompositeStore(SQLiteStore(tmp_path / "s.db"), files)
    first = composite.acquire_lease(session.id, "first", 30)
    composite.primary.db.execute("UPDATE leases SET expires_ms = 0")  # first stalls
    second = composite.acquire_lease(session.id, "second", 30)
    assert second.fencing_token == first.fencing_token + 1
    loaded = composite.load(session.id)
    loaded.status = "frozen"
    with pytest.raises(FencedOut):
        composite.save(loaded, (first,))
    saved = composite.save(loaded, (second,))
    assert composite.primary.load(session.id).version == saved.version
    agent = with_durable_workflows(parse_agent(DOC), composite)
    assert anyio.run(agent.resume, session.id).status == "completed"
