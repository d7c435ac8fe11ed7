"""The file backend keeps the same compare-and-set rule; the composite reads through."""

from __future__ import annotations

import pytest

from runner.session import Session, TrackedCall
from runner.state import new_token
from runner.stores import (
    CompositeStore,
    FileSessionStore,
    SessionNotFound,
    SQLiteStore,
    StoreError,
    VersionConflict,
)


def with_call(session: Session) -> tuple[Session, str]:
    token = new_token()
    session.calls["c"] = TrackedCall(id="c", token=token, tool="t", arguments={}, state="deferred",
                                     disposition={"tag": "defer", "reason": "r"}, turn=1,
                                     idempotency_key="k")  # fmt: skip
    return session, token


def test_file_store_compare_and_set_and_tokens(tmp_path):
    store = FileSessionStore(tmp_path / "files")
    session, token = with_call(Session.start("a", "h", "hi"))
    created = store.create(session, {"slug": "a"})
    assert created.version == 1 and store.find(token).call_id == "c"
    stale = store.load(session.id)
    fresh = store.load(session.id)
    fresh.final_answer = "x"
    assert store.save(fresh).version == 2
    with pytest.raises(VersionConflict):
        store.save(stale)
    assert store.load(session.id).final_answer == "x"
    assert [s.id for s in store.list("running")] == [session.id]
    assert store.find("../../etc/passwd") is None
    with pytest.raises(StoreError, match="not a valid session name"):
        store.load("../x")
    with pytest.raises(SessionNotFound):
        store.load("nope")


def test_composite_reads_fall_through_and_writes_go_to_the_primary(tmp_path):
    old = FileSessionStore(tmp_path / "old")
    new = SQLiteStore(tmp_path / "new.db")
    composite = CompositeStore(new, old)
    session, token = with_call(Session.start("a", "h", "hi"))
    old.create(session, {"slug": "a"})
    loaded = composite.load(session.id)
    assert composite.find(token).session_id == session.id
    loaded.final_answer = "moved"
    saved = composite.save(loaded)
    assert saved.version == 2 and new.load(session.id).final_answer == "moved"
    assert old.load(session.id).final_answer is None  # the fallback is never written
    assert new.find(token) is not None and new.agent_document("h") == {"slug": "a"}
    assert [s.id for s in composite.list()] == [session.id]
    with pytest.raises(VersionConflict):
        composite.save(loaded)
