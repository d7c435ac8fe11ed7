"""The session worker as a library class (runner.session.Worker) on a real SQLite store
with the scripted model: it advances a due session, and shutting it down drains (the
session in flight finishes and its lease is released; nothing new is claimed)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from runner.session import (
    Engine,
    SessionWorkerOptions,
    StoreCapabilityError,
    Worker,
    parse_agent,
)
from runner.stores import FileSessionStore, SQLiteStore
from runner.tools import ToolRegistry
from tests.session.conftest import agent_doc, calls

OPTIONS = SessionWorkerOptions(concurrency=2, poll_s=0.05)


def counting_agent() -> Any:
    return parse_agent(agent_doc([calls(("a", "count")), {"text": "done: {{result:a}}"}],
                                 ["count"]))  # fmt: skip


def released(store: SQLiteStore, session_id: str) -> bool:
    """Taken once, then given back (a released lease keeps its fencing token)."""
    lease = store.lease(session_id)
    return lease is not None and lease.owner == ""


def test_it_advances_a_due_session_and_exits_when_idle(store: SQLiteStore,
                                                       registry: ToolRegistry) -> None:  # fmt: skip
    registry.add("count", lambda arguments: 42)
    lines: list[str] = []
    engine = Engine(store, tools=registry)

    async def main() -> None:
        session = await engine.start(counting_agent(), "go")
        options = SessionWorkerOptions(poll_s=0.05, exit_when_idle=True)
        async with Worker(engine, options, log=lines.append) as worker:
            with anyio.fail_after(30):
                await worker.run()
        done = store.load(session.id)
        assert done.status == "completed" and done.final_answer == "done: 42"
        assert released(store, session.id)
        assert lines == [f"session {session.id}: completed, ran 1 call(s)"]

    anyio.run(main)


def test_shutting_down_drains_what_is_in_flight(store: SQLiteStore,
                                                registry: ToolRegistry) -> None:  # fmt: skip
    started, release = anyio.Event(), anyio.Event()

    async def blocking(arguments: dict[str, Any]) -> Any:
        started.set()
        await release.wait()
        return 42

    registry.add("count", blocking)
    lines: list[str] = []
    engine = Engine(store, tools=registry)

    async def main() -> None:
        first = await engine.start(counting_agent(), "go")
        async with anyio.create_task_group() as group:
            worker = Worker(engine, OPTIONS, log=lines.append)
            async with worker:
                group.start_soon(worker.run)
                with anyio.fail_after(30):
                    await started.wait()
                assert not released(store, first.id)  # held while its call runs
                worker.request_shutdown()
                later = await engine.start(counting_agent(), "not taken")
                await anyio.sleep(OPTIONS.poll_s * 4)  # polls it would have made
                release.set()
                with anyio.fail_after(30):
                    await worker.shutdown()  # waits for `run` to return
        assert store.load(first.id).status == "completed"
        assert released(store, first.id)
        assert store.load(later.id).status == "running"  # due, but never claimed
        assert f"worker {engine.owner}: draining (1 in flight)" in lines

    anyio.run(main)


def test_a_store_that_cannot_fence_is_refused(tmp_path) -> None:
    engine = Engine(FileSessionStore(tmp_path / "sessions"), single_process=True)
    with pytest.raises(StoreCapabilityError, match="a session worker needs"):
        Worker(engine)
