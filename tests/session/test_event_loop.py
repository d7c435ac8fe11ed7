"""Nothing a session does blocks the event loop: a synchronous tool that blocks for
seconds runs in a worker thread, and leases keep being renewed from their own thread, so
a short lease never lapses and nobody else can take the session over meanwhile."""

from __future__ import annotations

import threading
import time

import anyio

from runner.stores import SQLiteStore
from tests.session.conftest import agent_doc, calls

BLOCK_S = 3.0
LEASE_S = 1.0


def blocking_tool(arguments: dict) -> str:
    time.sleep(BLOCK_S)  # what a careless synchronous tool does: it holds its thread
    return "done blocking"


def test_a_blocking_run_sync_tool_lets_two_one_second_leases_live(durable, registry, store):
    registry.add("block", blocking_tool)
    document = agent_doc([calls(("a", "block")), {"text": "ok {{result:a}}"}], ["block"],
                         {"default": {"tag": "runSync"}})  # fmt: skip
    agent = durable(document, lease_s=LEASE_S, lease_wait_s=0)
    ids = [agent.start("go").id for _ in range(2)]
    # A rival on its own connection, as another process would be: it tries to take each
    # session over, and reads the leases in database time, the whole time.
    rival = SQLiteStore(store.path)
    seen: list[tuple[str, int, int, int]] = []  # (session, token, expires, db now)
    stolen: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for sid in ids:
                lease = rival.lease(sid)
                if lease is None or lease.owner != agent.owner:
                    continue  # not taken yet, or already released: nothing to steal
                seen.append((sid, lease.fencing_token, lease.expires_ms, rival.now_ms()))
                taken = rival.acquire_lease(sid, "rival", 30)
                if taken is not None:
                    # Taken from a holder that never released it: its lease had lapsed.
                    # (Taken after a clean release, in the instant since we looked, is
                    # not a takeover: the count is 0 then.)
                    if taken.takeovers:
                        stolen.append(sid)
                    rival.release_lease(taken)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)

    async def both() -> list:
        reports: list = []

        async def one(sid: str) -> None:
            reports.append(await agent.work(sid))

        watcher.start()
        try:
            async with anyio.create_task_group() as group:
                for sid in ids:
                    group.start_soon(one, sid)
        finally:
            stop.set()
        return reports

    reports = anyio.run(both)
    watcher.join()
    assert stolen == [], "a rival took a session over: a lease lapsed"
    assert {r.status for r in reports} == {"completed"}
    assert all(r.session.final_answer == "ok done blocking" for r in reports)
    # Watched over the whole block (3 lease periods), every lease stayed live and kept
    # its first token: renewed, never lapsed, never taken over.
    assert {sid for sid, *_ in seen} == set(ids)
    assert all(expires > now for _, _, expires, now in seen), "a lease was seen expired"
    assert {(sid, token) for sid, token, *_ in seen} == {(sid, 1) for sid in ids}
    for sid in ids:
        watched = [now for s, _, _, now in seen if s == sid]
        assert max(watched) - min(watched) >= (BLOCK_S - LEASE_S) * 1000  # not a glimpse
        lease = rival.lease(sid)
        assert lease.takeovers == 0 and lease.owner == ""  # released cleanly at the end
    rival.close()
