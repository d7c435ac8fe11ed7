"""The `server` bench rows: complete-and-resume round trips through `agents-runner serve`
(a real uvicorn, in a process of its own) on loopback: POST /v1/continuations/{token} with
`resume: true`, which applies the result and runs the model's next turn. The baseline is
the same complete + resume done in-process, without HTTP, on the same SQLite store in the
same run; the bench makes each waiting session in-process beforehand. Sequential latency
(p50, p95, p99) and the round trips per second of 8 concurrent clients."""

from __future__ import annotations

import hashlib
import json
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
from benchkit import Report, Row, compared

from runner.session import DurableAgent, ToolResult, parse_agent, with_durable_workflows
from runner.stores import SQLiteStore

#: One deferred call, then the final answer: a continuation with resume completes it.
SERVER_AGENT = {
    "slug": "bench-server",
    "executionMode": "asynchronous",
    "provider": {"tag": "scripted", "responses": [
        {"tool_calls": [{"id": "c1", "name": "later", "arguments": {}}]},
        {"text": "done: {{result:c1}}"}]},
    "tools": [{"name": "later", "kind": "external", "parameters": {"type": "object"}}],
    "toolCallPolicyConfig": {"default": {"tag": "defer", "reason": "bench"}},
}  # fmt: skip
TOKEN = "bench-operator-token"
RESULT = {"type": "text", "content": "42"}
CLIENTS = 8


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


@contextmanager
def serve_on_loopback(location: Path, directory: Path) -> Iterator[str]:
    """`agents-runner serve` (uvicorn) in a process of its own on a free loopback port,
    with a token file, on the bench's store; stopped with SIGTERM (a drain)."""
    tokens = directory / "tokens.json"
    tokens.write_text(
        json.dumps(
            [
                {
                    "name": "bench",
                    "role": "operator",
                    "sha256": hashlib.sha256(TOKEN.encode()).hexdigest(),
                }
            ]
        )
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # The loop polls rarely: these sessions are advanced by the requests, not by it. The
    # events row opens more streams with its one token than serve allows one by default.
    argv = [sys.executable, "-m", "runner.cli", "serve", "--store", str(location), "--port",
            str(port), "--tokens", str(tokens), "--poll-seconds", "5",
            "--max-event-streams-per-token", "256"]  # fmt: skip
    with (directory / "serve.log").open("wb") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                log_text = (directory / "serve.log").read_text()
                raise SystemExit(f"bench: serve did not start: {log_text}")
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        if process.wait(timeout=60) != 0:
            raise SystemExit(f"bench: serve exited {process.returncode}")


async def waiting_session(agent: DurableAgent) -> tuple[str, str]:
    """A session waiting on its deferred call: (session id, continuation token)."""
    report = await agent.run("go")
    if report.status != "waiting":
        raise SystemExit(f"bench: the session ended {report.status}, not waiting")
    return report.session.id, report.session.calls["c1"].token


async def over_http(http: httpx.AsyncClient, token: str) -> None:
    answer = await http.post(f"/v1/continuations/{token}", json={"result": RESULT, "resume": True})
    body = answer.json()
    if answer.status_code != 200 or (body.get("resumed") or {}).get("status") != "completed":
        raise SystemExit(f"bench: the continuation answered {answer.status_code}: {body}")


async def in_process(agent: DurableAgent, session_id: str, token: str) -> None:
    """What the endpoint does, without HTTP: complete by token, then resume."""
    await agent.complete_calls(session_id, [(token, ToolResult.ok("42"))])
    if (await agent.resume(session_id)).status != "completed":
        raise SystemExit("bench: the in-process resume did not complete the session")


async def bench_server(report: Report, directory: Path, samples: int = 200) -> None:
    store = SQLiteStore(directory / "server.db")
    agent = with_durable_workflows(parse_agent(SERVER_AGENT), store)
    try:
        with serve_on_loopback(directory / "server.db", directory) as url:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
                for _ in range(10):  # warm both paths (imports, connections, caches)
                    await over_http(http, (await waiting_session(agent))[1])
                    await in_process(agent, *await waiting_session(agent))
                ours, baseline = [], []
                for _ in range(samples):  # interleaved: a busy moment slows both alike
                    _, token = await waiting_session(agent)
                    started = time.perf_counter()
                    await over_http(http, token)
                    ours.append((time.perf_counter() - started) * 1000)
                    session_id, token = await waiting_session(agent)
                    started = time.perf_counter()
                    await in_process(agent, session_id, token)
                    baseline.append((time.perf_counter() - started) * 1000)
                # No target: the ratio is what HTTP, auth and the route's own lookups (the
                # token, the session, its agent) add to the engine's work, for the record.
                row = compared("server: continuation + resume over HTTP, per round trip", ours,
                               "the same complete + resume in-process", baseline, 0)  # fmt: skip
                row.target, row.met = "", None
                row.note = (f"p99 {p99(ours):.2f} ms over HTTP, {p99(baseline):.2f} ms"
                            f" in-process; {1000 / statistics.mean(ours):.0f} round trips/s"
                            f" from one client against {1000 / statistics.mean(baseline):.0f}"
                            " in-process")  # fmt: skip
                report.rows.append(row)
                report.rows.append(await concurrent_rate(http, agent, samples))
    finally:
        store.close()


async def concurrent_rate(http: httpx.AsyncClient, agent: DurableAgent, total: int) -> Row:
    """Round trips per second with CLIENTS clients posting at once, against CLIENTS
    in-process tasks doing the same complete + resume."""
    http_rate, http_ms = await _at_once(http, agent, total, over=True)
    local_rate, local_ms = await _at_once(http, agent, total, over=False)
    return Row(f"server: round trips/s, {CLIENTS} concurrent clients", "1/s", http_rate,
               http_rate, total, f"{CLIENTS} in-process tasks", local_rate, local_rate,
               http_rate / local_rate, "",
               note=f"latency p50/p99 {statistics.median(http_ms):.1f}/{p99(http_ms):.1f} ms"
                    f" over HTTP, {statistics.median(local_ms):.1f}/{p99(local_ms):.1f} ms"
                    " in-process (one SQLite store)")  # fmt: skip


async def _at_once(
    http: httpx.AsyncClient, agent: DurableAgent, total: int, over: bool
) -> tuple[float, list[float]]:
    """`total` round trips by CLIENTS tasks at once: (round trips/s, latencies in ms)."""
    prepared = [await waiting_session(agent) for _ in range(total)]
    latencies: list[float] = []

    async def client(mine: list[tuple[str, str]]) -> None:
        for session_id, token in mine:
            started = time.perf_counter()
            if over:
                await over_http(http, token)
            else:
                await in_process(agent, session_id, token)
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for n in range(CLIENTS):
            group.start_soon(client, prepared[n::CLIENTS])
    return total / (time.perf_counter() - started), latencies
