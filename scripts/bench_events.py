"""The `events` bench row: Server-Sent Events fan-out through `agents-runner serve` (a real
uvicorn in a process of its own) on loopback. Subscribers hold `GET /v1/events` open; the
bench posts a completion (POST /v1/continuations/{token}) and times, for each subscriber,
from just before the POST to the moment its stream delivers that call's `call.completed`.
Measured at 100 subscribers against 1 subscriber (the baseline), in alternating blocks of
the same run, so a busy moment slows both alike. The subscribers share this process's
event loop, so the 100-subscriber times include reading 100 streams here too."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import anyio
import httpx
from bench_server import SERVER_AGENT, TOKEN, p99, serve_on_loopback, waiting_session
from benchkit import Report, Row, p95

from runner.session import parse_agent, with_durable_workflows
from runner.stores import SQLiteStore

SUBSCRIBERS = 100
#: Blocks of each size, and completions timed per block.
ROUNDS, PER_BLOCK = 4, 10
#: Longest a block waits for every subscriber to receive one completion.
WAIT_S = 30.0


class Tally:
    """How many subscribers have opened, and have received each session's completion."""

    def __init__(self, count: int) -> None:
        self.count, self.opened, self.ready = count, 0, anyio.Event()
        self.arrivals: dict[str, int] = {}
        self.everyone: dict[str, anyio.Event] = {}

    def open(self) -> None:
        self.opened += 1
        if self.opened == self.count:
            self.ready.set()

    def arrived(self, session_id: str) -> None:
        self.arrivals[session_id] = self.arrivals.get(session_id, 0) + 1
        if self.arrivals[session_id] == self.count:
            self.all_of(session_id).set()

    def all_of(self, session_id: str) -> anyio.Event:
        return self.everyone.setdefault(session_id, anyio.Event())


async def subscriber(http: httpx.AsyncClient, tally: Tally, received: dict[str, float]) -> None:
    """Hold /v1/events open; note when each call.completed arrives (key: its session)."""
    async with http.stream("GET", "/v1/events") as response:
        if response.status_code != 200:
            raise SystemExit(f"bench: /v1/events answered {response.status_code}")
        kind = ""
        async for line in response.aiter_lines():
            if line.startswith(": subscribed"):
                tally.open()
            elif line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind == "call.completed":
                session_id = json.loads(line[6:])["session_id"]
                received[session_id] = time.perf_counter()
                tally.arrived(session_id)


async def block(url: str, count: int, tokens: list[tuple[str, str]]) -> list[float]:
    """`count` subscribers, one timed completion per token: latencies in ms."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=count + 10)
    received: list[dict[str, float]] = [{} for _ in range(count)]
    latencies: list[float] = []
    async with (
        httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=limits) as http,
        anyio.create_task_group() as group,
    ):
        tally = Tally(count)
        for mine in received:
            group.start_soon(subscriber, http, tally, mine)
        with anyio.fail_after(WAIT_S):
            await tally.ready.wait()
        for session_id, token in tokens:
            started = time.perf_counter()
            answer = await http.post(f"/v1/continuations/{token}", json={"result": "42"})
            if answer.status_code != 200:
                raise SystemExit(f"bench: the continuation answered {answer.status_code}")
            with anyio.fail_after(WAIT_S):
                await tally.all_of(session_id).wait()
            latencies += [(mine[session_id] - started) * 1000 for mine in received]
        group.cancel_scope.cancel()
    return latencies


async def bench_events(report: Report, directory: Path) -> None:
    store = SQLiteStore(directory / "events.db")
    agent = with_durable_workflows(parse_agent(SERVER_AGENT), store)
    try:
        blocks = 2 * ROUNDS + 2  # and one warm-up block of each size
        tokens = [await waiting_session(agent) for _ in range(blocks * PER_BLOCK)]
        with serve_on_loopback(directory / "events.db", directory) as url:
            fanned, single = [], []
            for n in range(ROUNDS + 1):
                chunk = tokens[2 * n * PER_BLOCK : (2 * n + 2) * PER_BLOCK]
                many = await block(url, SUBSCRIBERS, chunk[:PER_BLOCK])
                one = await block(url, 1, chunk[PER_BLOCK:])
                if n > 0:  # the first round warms both up
                    fanned += many
                    single += one
    finally:
        store.close()
    ratio = statistics.median(fanned) / statistics.median(single)
    report.rows.append(Row(
        f"SSE fan-out: completion posted -> event received, {SUBSCRIBERS} subscribers", "ms",
        statistics.median(fanned), p95(fanned), len(fanned), "the same, 1 subscriber",
        statistics.median(single), p95(single), ratio, "",
        note=f"p50/p99 {statistics.median(fanned):.1f}/{p99(fanned):.1f} ms to each of"
             f" {SUBSCRIBERS} subscribers, {statistics.median(single):.1f}/{p99(single):.1f} ms"
             f" to 1 ({ROUNDS * PER_BLOCK} completions each, over loopback)"))  # fmt: skip
