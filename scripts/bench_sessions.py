"""The bench rows of durable sessions: checkpoints and resumes by length (SQLite), and
the same agent on PostgreSQL beside SQLite."""

from __future__ import annotations

import statistics
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import psycopg
from benchkit import Report, Row, p95, timed

from runner.llm.scripted import ScriptedLLM
from runner.session import parse_agent, with_durable_workflows
from runner.stores import DurableStore, SQLiteStore, open_store

REPO = Path(__file__).resolve().parent.parent

#: The agent every session row runs: the same definition (and hash) at every size, so
#: the rows differ only in the session's length; the LLM's script is passed beside it.
SESSION_AGENT = {
    "slug": "bench-sessions",
    "executionMode": "asynchronous",
    "provider": {"tag": "scripted", "responses": [{"text": "unused: the bench passes llm="}]},
    "tools": [{"name": "echo", "kind": "builtin",
               "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}},
              {"name": "later", "kind": "external", "parameters": {"type": "object"}}],
    "toolCallPolicyConfig": {"default": {"tag": "runSync"}, "rules": [
        {"match": {"tool": "later"}, "disposition": {"tag": "defer", "reason": "bench"}}]},
}  # fmt: skip


def script_with_turns(turns: int) -> ScriptedLLM:
    """An LLM script that leaves a session of about `turns` turns waiting: the prompt,
    then (LLM turn + tool results) pairs of a builtin `echo` call, then a deferred call."""
    pairs = max(0, (turns - 3) // 2)
    responses = [{"tool_calls": [{"id": f"e{i}", "name": "echo",
                                  "arguments": {"text": f"step {i} " + "x" * 100}}]}
                 for i in range(pairs)]  # fmt: skip
    responses.append({"tool_calls": [{"id": "wait", "name": "later", "arguments": {}}]})
    return ScriptedLLM(responses)


async def bench_sessions(report: Report, directory: Path, samples: int = 30) -> None:
    resume: dict[int, list[float]] = {}
    saves: dict[int, list[float]] = {}
    for turns in (10, 100, 1000):
        store = SQLiteStore(directory / f"sessions-{turns}.db")
        agent = replace(with_durable_workflows(parse_agent(SESSION_AGENT), store),
                        llm=script_with_turns(turns))  # fmt: skip
        built = time.perf_counter()
        stepped = await agent.run("go")
        while stepped.session.status == "running":  # a resume stops after so many steps
            stepped = await agent.resume(stepped.session.id)
        if stepped.session.status != "waiting":
            raise SystemExit(f"bench: the {turns}-turn session ended {stepped.session.status}")
        session_id = stepped.session.id
        built_s = time.perf_counter() - built
        resume[turns] = [await timed(agent.resume, session_id) for _ in range(samples)]
        # One step's checkpoint, as the scheduler makes it: load the session, change a
        # call (as a step does when it runs or finishes one), compare-and-set save.
        saves[turns] = []
        session = store.load(session_id, history=False)  # what the scheduler loads
        (waiting,) = session.open_calls()
        for n in range(samples):
            waiting.updated_ms = n
            started = time.perf_counter()
            stored = store.save(session)
            saves[turns].append((time.perf_counter() - started) * 1000)
            session.version = stored.version
        count = store.load(session_id).turn_count
        report.rows.append(Row(f"session checkpoint (store.save), {count} turns",
                               "ms", statistics.median(saves[turns]), p95(saves[turns]),
                               samples, target="<= 1 ms", met=p95(saves[turns]) <= 1.0,
                               note=f"built by the scheduler in {built_s:.1f}s"))  # fmt: skip
    for turns in (10, 100, 1000):
        row = Row(f"session resume (waiting), {turns} turns", "ms",
                  statistics.median(resume[turns]), p95(resume[turns]), samples)  # fmt: skip
        if turns != 10:
            row.baseline = "resume at 10 turns"
            row.baseline_median, row.baseline_p95 = statistics.median(resume[10]), p95(resume[10])
            row.ratio = row.median / row.baseline_median
            if turns == 1000:
                row.target, row.met = "ratio <= 1.5", row.ratio <= 1.5
        report.rows.append(row)


# --- PostgreSQL beside SQLite ------------------------------------------------------------

#: Agent iterations per timed sample (one LLM turn asking for one `echo` call, its
#: result recorded): a session of this many iterations, built from scratch.
ITERATIONS = 20
#: What each worker-throughput session does: one LLM turn, one `echo` call, the answer.
THROUGHPUT_AGENT = {
    **SESSION_AGENT,
    "slug": "bench-throughput",
    "provider": {"tag": "scripted", "responses": [
        {"tool_calls": [{"id": "e", "name": "echo", "arguments": {"text": "hi"}}]},
        {"text": "done: {{result:e}}"}]},
}  # fmt: skip


async def iteration_ms(store: DurableStore) -> float:
    """Milliseconds per agent iteration on `store`: a session of ITERATIONS iterations,
    run by the scheduler until it waits, divided by ITERATIONS."""
    agent = replace(with_durable_workflows(parse_agent(SESSION_AGENT), store),
                    llm=script_with_turns(2 * ITERATIONS + 3))  # fmt: skip
    started = time.perf_counter()
    report = await agent.run("go")
    while report.session.status == "running":
        report = await agent.resume(report.session.id)
    if report.session.status != "waiting":
        raise SystemExit(f"bench: the iteration session ended {report.session.status}")
    return (time.perf_counter() - started) * 1000 / ITERATIONS


def transactions(url: str) -> int:
    """Transactions committed in the database so far (pg_stat_database)."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("SELECT pg_stat_clear_snapshot()")
        row = db.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database"
                         " WHERE datname = current_database()").fetchone()  # fmt: skip
    return int(row[0]) if row else 0


async def bench_postgres(report: Report, url: str, directory: Path, samples: int = 10) -> None:
    """Per-iteration cost on PostgreSQL vs SQLite (interleaved, same agent), the
    database transactions one iteration takes, and worker throughput at 1, 2, 4 processes."""
    with database_of_its_own(url) as database:
        per_iteration, ours, theirs = await _iterations(database, directory, samples)
    ratio = statistics.median(ours) / statistics.median(theirs)
    report.rows.append(Row(
        "agent iteration (1 LLM turn + 1 tool call), PostgreSQL", "ms",
        statistics.median(ours), p95(ours), samples, "same on SQLite",
        statistics.median(theirs), p95(theirs), ratio,
        note=f"{per_iteration:.1f} database transactions per iteration on PostgreSQL",
    ))  # fmt: skip
    rates: dict[int, float] = {}
    for workers in (1, 2, 4):
        rates[workers] = await worker_throughput(url, workers)
        row = Row(f"worker throughput on PostgreSQL, {workers} process(es)", "calls/s",
                  rates[workers], rates[workers], THROUGHPUT_SESSIONS)  # fmt: skip
        if workers > 1:
            row.baseline, row.baseline_median = "1 process", rates[1]
            row.ratio = rates[workers] / rates[1]
        report.rows.append(row)


async def _iterations(
    url: str, directory: Path, samples: int
) -> tuple[float, list[float], list[float]]:
    """(transactions per iteration on PostgreSQL, ms per iteration there, on SQLite)."""
    sqlite, postgres = SQLiteStore(directory / "iterations.db"), open_store(url)
    assert isinstance(postgres, DurableStore)
    try:
        await iteration_ms(sqlite), await iteration_ms(postgres)  # warm both up
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(samples):
            theirs.append(await iteration_ms(sqlite))
            ours.append(await iteration_ms(postgres))
    finally:
        sqlite.close()
        postgres.close()
    # Counted on a store of its own: its connections end with it, and a backend that
    # ends reports its statistics (an idle one may wait seconds to).
    before = transactions(url)
    counted = open_store(url)
    assert isinstance(counted, DurableStore)
    try:
        await iteration_ms(counted)
    finally:
        counted.close()
    await anyio.sleep(0.5)
    return (transactions(url) - before) / ITERATIONS, ours, theirs


#: Sessions each throughput row completes (one `echo` call each).
THROUGHPUT_SESSIONS = 200


async def worker_throughput(url: str, workers: int) -> float:
    """Calls per second that `workers` worker processes complete: THROUGHPUT_SESSIONS
    sessions are stored (in a database of their own) first, then the workers run until
    nothing is left."""
    with database_of_its_own(url) as url:
        return await _throughput(url, workers)


@contextmanager
def database_of_its_own(server_url: str) -> Iterator[str]:
    """A new database on the server, dropped afterwards: each row starts empty."""
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _throughput(url: str, workers: int) -> float:
    store = open_store(url)
    try:
        agent = with_durable_workflows(parse_agent(THROUGHPUT_AGENT), store)
        for _ in range(THROUGHPUT_SESSIONS):
            agent.start("go")
    finally:
        store.close()
    command = [str(REPO / ".venv/bin/agents-runner"), "worker", "--store", url,
               "--exit-when-idle", "--concurrency", "4", "--poll-seconds", "0.05"]  # fmt: skip
    started = time.perf_counter()
    processes = [await anyio.open_process(command, stderr=subprocess.DEVNULL)
                 for _ in range(workers)]  # fmt: skip
    for process in processes:
        if await process.wait() != 0:
            raise SystemExit(f"bench: a worker exited {process.returncode}")
    elapsed = time.perf_counter() - started
    store = open_store(url)
    try:
        left = [row.id for row in store.list() if row.status != "completed"]
    finally:
        store.close()
    if left:
        raise SystemExit(f"bench: {len(left)} throughput session(s) were not completed")
    return THROUGHPUT_SESSIONS / elapsed
