"""The `claims` bench rows: external workers claiming deferred calls from `agents-runner
serve` (a real uvicorn, in a process of its own) over loopback. Each worker loops POST
/v1/claims then POST /v1/claims/{claim}/complete until nothing is left; the row is claims
per second with 8 concurrent workers (each its own HTTP connection), as a ratio against 1
worker on the same server in the same run, batches interleaved. On SQLite, and on
PostgreSQL too when scripts/bench gives it a server."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import anyio
import httpx
from bench_server import TOKEN, p99, serve_on_loopback
from bench_sessions import database_of_its_own
from benchkit import Report, Row

from runner.session import DurableAgent, parse_agent, with_durable_workflows
from runner.stores import DurableStore, open_store

#: One deferred call of `work` (no effects), then the final answer.
CLAIMS_AGENT = {
    "slug": "bench-claims",
    "executionMode": "asynchronous",
    "provider": {"tag": "scripted", "responses": [
        {"tool_calls": [{"id": "c1", "name": "work", "arguments": {"n": 1}}]},
        {"text": "done: {{result:c1}}"}]},
    "tools": [{"name": "work", "kind": "external", "effects": "none"}],
    "toolCallPolicyConfig": {"default": {"tag": "defer", "reason": "bench"}},
}  # fmt: skip
WORKERS = 8
#: Calls per batch, by worker count, and how many batches of each (interleaved).
CALLS = {1: 60, WORKERS: 240}
ROUNDS = 3
POSTGRES_URL_VARIABLE = "AGENTS_RUNNER_BENCH_POSTGRES_URL"


async def bench_claims(report: Report, directory: Path) -> None:
    await _rows(report, "SQLite", str(directory / "claims.db"), directory)
    server = os.environ.get(POSTGRES_URL_VARIABLE)
    if server:
        with database_of_its_own(server) as url:
            await _rows(report, "PostgreSQL", url, directory)


async def _rows(report: Report, engine: str, location: str, directory: Path) -> None:
    store = open_store(location)
    assert isinstance(store, DurableStore)
    agent = with_durable_workflows(parse_agent(CLAIMS_AGENT), store)
    try:
        # The in-process loop polls rarely: the workers, not it, are what is measured.
        with serve_on_loopback(location, directory) as url:  # type: ignore[arg-type]
            await _batch(url, agent, 1, 10)  # warm up: imports, connections, caches
            rates: dict[int, list[float]] = {1: [], WORKERS: []}
            latencies: dict[int, list[float]] = {1: [], WORKERS: []}
            for _ in range(ROUNDS):
                for workers in (1, WORKERS):
                    rate, taken = await _batch(url, agent, workers, CALLS[workers])
                    rates[workers].append(rate)
                    latencies[workers] += taken
    finally:
        store.close()
    one, many = statistics.median(rates[1]), statistics.median(rates[WORKERS])
    ms = latencies[WORKERS]
    report.rows.append(Row(
        f"claims: claim + complete over HTTP, {WORKERS} concurrent workers ({engine})", "1/s",
        many, min(rates[WORKERS]), ROUNDS * CALLS[WORKERS], "1 worker, same server", one,
        min(rates[1]), many / one,
        note=f"medians of {ROUNDS} interleaved batches; claim + complete p50/p99"
             f" {statistics.median(ms):.1f}/{p99(ms):.1f} ms with {WORKERS} workers,"
             f" {statistics.median(latencies[1]):.1f}/{p99(latencies[1]):.1f} ms with 1"
             " (the p95 columns hold the slowest batch's rate). No target: the server is one"
             " process, so the ratio says whether concurrent workers cost throughput (they"
             " must not: each claim is one transaction, SKIP LOCKED on PostgreSQL) more than"
             f" how far one server scales; on {os.cpu_count()} cores it shares them with the"
             " workers and the database",
    ))  # fmt: skip


async def _batch(
    url: str, agent: DurableAgent, workers: int, calls: int
) -> tuple[float, list[float]]:
    """`calls` waiting sessions, then `workers` workers claiming and completing until
    none is left: (claims per second, claim + complete latencies in ms)."""
    for _ in range(calls):
        report = await agent.run("go")
        if report.status != "waiting":
            raise SystemExit(f"bench: a session ended {report.status}, not waiting")
    latencies: list[float] = []
    done = 0

    async def worker() -> None:
        nonlocal done
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
            while True:
                started = time.perf_counter()
                answer = await http.post("/v1/claims", json={"tools": ["work"]})
                if answer.status_code != 200:
                    raise SystemExit(f"bench: claim answered {answer.status_code}: {answer.text}")
                claims = answer.json()["claims"]
                if not claims:
                    return
                token = claims[0]["claim"]
                answer = await http.post(f"/v1/claims/{token}/complete", json={"result": "ok"})
                if answer.status_code != 200 or answer.json()["status"] != "applied":
                    raise SystemExit(f"bench: complete answered {answer.status_code}:"
                                     f" {answer.text}")  # fmt: skip
                latencies.append((time.perf_counter() - started) * 1000)
                done += 1

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(workers):
            group.start_soon(worker)
    elapsed = time.perf_counter() - started
    if done != calls:
        raise SystemExit(f"bench: {done} calls completed of {calls}")
    return calls / elapsed, latencies
