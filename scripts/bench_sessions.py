"""The bench rows of durable sessions: checkpoints and resumes by length (SQLite), and
the same agent on PostgreSQL beside SQLite."""

from __future__ import annotations

import itertools
import sqlite3
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

from runner.llm import LLMRequest, LLMResponse
from runner.llm.scripted import ScriptedLLM
from runner.session import Engine, parse_agent, with_durable_workflows
from runner.session.storage import StoreCalls
from runner.state import ToolResult
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
                row.target, row.met = "ratio <= 1.2", row.ratio <= 1.2
        report.rows.append(row)
    await bench_iteration(report, directory)
    await bench_step_by_length(report, directory)


# --- store round trips of the Engine's continuation and resume ---------------------------

#: The targets: a continuation by token is one call that finds the token's session, takes
#: its lease and loads it, and one that commits and lets the lease go; the resume after
#: it takes the lease with the load, commits the model call's attempt and the answer, and
#: lets the lease go.
CONTINUATION_TRIPS = 2
RESUME_TRIPS = 4


async def bench_round_trips(report: Report, directory: Path, samples: int = 10) -> None:
    """The store calls of `Engine.complete` by continuation token (target: two) and of
    the resume that follows, counted on a real SQLite store (StoreCalls: each call of a
    store method is one round trip). The engine has read the session's agent before
    (it keeps stored agents), as a long-running server has."""
    store = SQLiteStore(directory / "round-trips.db")
    engine = Engine(store)
    agent = parse_agent(SESSION_AGENT)
    continuation: list[float] = []
    resume: list[float] = []
    kinds: dict[str, dict[str, int]] = {}
    for _ in range(samples):
        session = await engine.start(agent, "go")
        await engine.agent_of(session.agent_hash)  # kept from now on
        # one `echo` call, then the deferred `later` call the continuation answers
        durable = replace(engine.agent(agent), llm=script_with_turns(5))
        waiting = await durable.resume(session.id)
        if waiting.status != "waiting":
            raise SystemExit(f"bench: the round-trip session ended {waiting.status}")
        (call,) = waiting.session.waiting_on()
        counted = StoreCalls(store)
        try:
            await engine.complete(call.token, ToolResult(status="ok", content="done"))
            kinds["continuation"] = dict(counted.counts)
            continuation.append(counted.total)
            counted.reset()
            await durable.resume(session.id)
            kinds["resume"] = dict(counted.counts)
            resume.append(counted.total)
        finally:
            counted.stop()
    store.close()
    trips, resume_p95 = p95(continuation), p95(resume)
    report.rows.append(Row("continuation by token (Engine.complete): store round trips",
                           "calls", statistics.median(continuation), trips, samples,
                           target=f"<= {CONTINUATION_TRIPS}", met=trips <= CONTINUATION_TRIPS,
                           note=_calls(kinds["continuation"]),
                           detail={"calls": kinds["continuation"]}))  # fmt: skip
    report.rows.append(Row("resume of the completed session: store round trips", "calls",
                           statistics.median(resume), resume_p95, samples,
                           target=f"<= {RESUME_TRIPS}", met=resume_p95 <= RESUME_TRIPS,
                           note=_calls(kinds["resume"]),
                           detail={"calls": kinds["resume"]}))  # fmt: skip


def _calls(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(counts.items()))


# --- one agent iteration, and a step by the session's length -----------------------------

#: Iterations of the two sessions whose difference is timed: (long - short) / (90).
SHORT, LONG = 10, 100


def iteration_script(iterations: int) -> ScriptedLLM:
    """`iterations` LLM turns each asking for one builtin `echo` call, then the answer."""
    responses: list[dict[str, object]] = [
        {"tool_calls": [{"id": f"e{i}", "name": "echo", "arguments": {"text": f"step {i}"}}]}
        for i in range(iterations)
    ]
    responses.append({"text": "done"})
    return ScriptedLLM(responses)


async def run_iterations(store: SQLiteStore, iterations: int) -> tuple[float, float, int]:
    """(wall ms, CPU ms, commits) of a session of `iterations` agent iterations, from its
    start to its answer, run by the scheduler as `run` and `resume` do."""
    agent = replace(with_durable_workflows(parse_agent(SESSION_AGENT), store),
                    llm=iteration_script(iterations))  # fmt: skip
    commits, cpu, wall = store.commits, time.process_time(), time.perf_counter()
    report = await agent.run("go")
    while report.session.status == "running":  # a resume stops after so many steps
        report = await agent.resume(report.session.id)
    if report.session.status != "completed":
        raise SystemExit(f"bench: the iteration session ended {report.session.status}")
    return ((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000,
            store.commits - commits)  # fmt: skip


class CommitBaseline:
    """One WAL commit (a one-row insert) with `synchronous`, in a file of its own in the
    bench's directory. Its log is filled past SQLite's checkpoint size first, so commits
    reuse it as a store's long-lived log does (appending to a new one costs more)."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        self.db.execute("PRAGMA synchronous=OFF")
        for _ in range(400):  # about 1200 pages: past the 1000-page auto-checkpoint
            self.db.execute("INSERT INTO t (v) VALUES (?)", ("x" * 10_000,))
        self.db.execute(f"PRAGMA synchronous={synchronous}")

    def sample(self, commits: int) -> list[float]:
        times = []
        for _ in range(commits):
            started = time.perf_counter()
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("INSERT INTO t (v) VALUES (?)", ("x" * 200,))
            self.db.execute("COMMIT")
            times.append((time.perf_counter() - started) * 1000)
        return times

    def close(self) -> None:
        self.db.close()


#: Iterations of the sessions whose commits are counted within one resume (<= 32).
COUNTED_SHORT, COUNTED_LONG = 10, 30


async def bench_iteration(report: Report, directory: Path, samples: int = 7) -> None:
    """One agent iteration (an LLM turn asking for one in-process `echo` call, its result
    recorded) as (100 iterations - 10 iterations) / 90, so that what a session costs once
    (start, leases, loads) cancels out; beside one WAL commit in the same directory,
    sampled between the sessions, with synchronous=FULL (the target's) and NORMAL
    (SQLiteStore's default). Commits are counted by the store: per iteration within one
    resume ((30 - 10) / 20, both in one resume), and as (100 - 10) / 90, which adds the
    lease taken and released by each resume (a resume stops after 64 steps)."""
    for synchronous in ("FULL", "NORMAL"):
        store = SQLiteStore(directory / f"iterations-{synchronous}.db",
                            synchronous="FULL" if synchronous == "FULL" else "NORMAL")  # fmt: skip
        baseline = CommitBaseline(directory / f"commit-{synchronous}.db", synchronous)
        try:
            await run_iterations(store, SHORT)  # warm up
            per: list[float] = []
            cpu: list[float] = []
            commits: list[float] = []
            commit: list[float] = []
            for _ in range(samples):
                short, long = await run_iterations(store, SHORT), await run_iterations(store, LONG)
                per.append((long[0] - short[0]) / (LONG - SHORT))
                cpu.append((long[1] - short[1]) / (LONG - SHORT))
                commits.append((long[2] - short[2]) / (LONG - SHORT))
                commit.extend(baseline.sample(30))
            one = await run_iterations(store, COUNTED_SHORT)
            other = await run_iterations(store, COUNTED_LONG)
        finally:
            store.close()
            baseline.close()
        in_resume = (other[2] - one[2]) / (COUNTED_LONG - COUNTED_SHORT)
        median = statistics.median(per)
        row = Row(f"agent iteration (LLM turn + 1 in-process call), WAL synchronous={synchronous}",
                  "ms", median, p95(per), samples, f"one WAL commit, synchronous={synchronous}",
                  statistics.median(commit), p95(commit), median / statistics.median(commit),
                  note=f"{in_resume:.2f} commits per iteration in a resume,"
                  f" {statistics.median(commits):.2f} with each resume's lease (counted by the"
                  f" store); {statistics.median(cpu):.3f} ms CPU per iteration (all threads);"
                  " (100 - 10 iterations) / 90")  # fmt: skip
        if synchronous == "FULL":
            row.target, row.met = "<= 0.6 ms", median <= 0.6
        report.rows.append(row)
        if synchronous == "FULL":
            note = (f"{statistics.median(commits):.2f} as (100 - 10) / 90, with the lease"
                    " commits of a resume every 64 steps")  # fmt: skip
            report.rows.append(Row("commits per agent iteration (in a resume)", "commits",
                                   in_resume, in_resume, COUNTED_LONG - COUNTED_SHORT,
                                   target="<= 2", met=in_resume <= 2, note=note))  # fmt: skip


class TimedLLM:
    """An LLM that notes when each request arrives: the time between two requests of one
    resume is one whole agent iteration (answer committed, call run, results committed,
    the next request built)."""

    def __init__(self, inner: ScriptedLLM) -> None:
        self.inner = inner
        self.arrivals: list[float] = []

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.arrivals.append(time.perf_counter())
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


#: Iterations timed at each length (a resume runs at most 32: 64 steps).
TIMED_ITERATIONS = 30


async def bench_step_by_length(report: Report, directory: Path) -> None:
    """An agent step at turn 10 and at turn 1000, in a resume: a session is built to that
    length (until it waits on a deferred call), the call is completed, and the intervals
    between the model requests of the resume that follows are the iterations timed."""
    steps: dict[int, list[float]] = {}
    for turns in (10, 1000):
        pairs = max(0, (turns - 3) // 2)
        echo = [{"tool_calls": [{"id": f"e{i}", "name": "echo",
                                 "arguments": {"text": f"step {i} " + "x" * 100}}]}
                for i in range(pairs + 1 + TIMED_ITERATIONS)]  # fmt: skip
        echo[pairs] = {"tool_calls": [{"id": "wait", "name": "later", "arguments": {}}]}
        llm = TimedLLM(ScriptedLLM([*echo, {"text": "done"}]))
        store = SQLiteStore(directory / f"steps-{turns}.db")
        try:
            agent = replace(with_durable_workflows(parse_agent(SESSION_AGENT), store), llm=llm)
            stepped = await agent.run("go")
            while stepped.session.status == "running":
                stepped = await agent.resume(stepped.session.id)
            (waiting,) = stepped.session.waiting_on()
            await agent.complete_calls(
                stepped.session.id, [(waiting.token, ToolResult.ok("later"))]
            )
            count = store.load(stepped.session.id, history=False).turn_count
            llm.arrivals.clear()
            final = await agent.resume(stepped.session.id)
        finally:
            store.close()
        if final.session.status != "completed" or len(llm.arrivals) != TIMED_ITERATIONS + 1:
            raise SystemExit(f"bench: the {turns}-turn step session ended {final.session.status}"
                             f" after {len(llm.arrivals)} requests")  # fmt: skip
        steps[turns] = [(b - a) * 1000 for a, b in itertools.pairwise(llm.arrivals)]
        row = Row(f"agent step at turn {count} (LLM turn + 1 call, in a resume)", "ms",
                  statistics.median(steps[turns]), p95(steps[turns]), TIMED_ITERATIONS)  # fmt: skip
        if turns != 10:
            row.baseline = "step at turn 10"
            row.baseline_median, row.baseline_p95 = statistics.median(steps[10]), p95(steps[10])
            row.ratio = row.median / row.baseline_median
            row.target, row.met = "ratio <= 1.2", row.ratio <= 1.2
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
