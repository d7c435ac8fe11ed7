"""scripts/bench: what isolation and durable sessions cost, side by side in one run.

Each row times our code and, where there is one, the bare baseline it is compared with,
interleaved sample by sample (so a busy machine slows both alike), and reports medians,
p95 and the ratio of the medians. It assumes what `scripts/test` sets up: `.venv`, a
running Docker engine and the images of `scripts/build-images`.

    scripts/bench [--json FILE|-]
                  [--only local,docker,pool,runtimes,throughput,sessions,roundtrips,
                          postgres,server,events,claims,workers,bodies,wire]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import docker
from bench_bodies import bench_bodies
from bench_claims import bench_claims
from bench_events import bench_events
from bench_runtimes import bench_runtimes
from bench_server import bench_server
from bench_sessions import bench_postgres, bench_round_trips, bench_sessions
from bench_wire import bench_wire
from bench_workers import bench_workers
from benchkit import Report, Row, compared, p95, render, request, timed

from envelopes import codec
from envelopes.v1 import ToolCallRequest
from runner.isolation import (
    ContainerLimits,
    DockerRunner,
    LocalProcessRunner,
    PoolSettings,
    WarmPool,
)
from runner.isolation.containers import (
    DEFAULT_SECCOMP_PROFILE,
    LABEL_MANAGED,
    LABEL_OWNER,
    my_owner_token,
)

REPO = Path(__file__).resolve().parent.parent
BASH_IMAGE = "agents-runner/bash-runner:latest"
#: The local rows' workers: the bash + jq example (a real worker that checks its input),
#: and the smallest possible one (sh answering a fixed id), where the runner's own cost
#: has nowhere to hide.
EXAMPLE_WORKER = ["bash", str(REPO / "examples/workers/bash/worker.sh")]
MINIMAL_WORKER = ["sh", "-c", "cat >/dev/null; printf '%s' '{\"kind\":\"ToolCallResult\","
                  "\"version\":\"1.0\",\"id\":\"bench-0\",\"status\":\"ok\","
                  "\"output\":{\"type\":\"text\",\"content\":\"hi\"}}'"]  # fmt: skip
ROWS = ("local", "docker", "pool", "runtimes", "throughput", "sessions", "roundtrips",
        "postgres", "server", "events", "claims", "workers", "bodies", "wire")  # fmt: skip
#: `--json -`: the rows as JSON on stdout.
STDOUT = Path("-")
#: The PostgreSQL server the `postgres` rows use (scripts/bench starts a throwaway one).
POSTGRES_URL_VARIABLE = "AGENTS_RUNNER_BENCH_POSTGRES_URL"


def must_be_ok(outcome: Any) -> None:
    if not outcome.ok:
        raise SystemExit(f"bench: a call failed: {outcome.result.error}")


async def run_cli(argv: list[str], payload: bytes) -> None:
    """The baseline: a bare blocking subprocess with the same envelope on stdin."""
    # Blocking on purpose: the baseline is the plain synchronous way to run a worker.
    done = subprocess.run(argv, input=payload, capture_output=True, check=True)  # noqa: ASYNC221
    json.loads(done.stdout)


async def run_ok(runner: Any, call: ToolCallRequest, pooled: bool | None = None) -> None:
    outcome = await runner.call(call)
    must_be_ok(outcome)
    if pooled is not None and outcome.runner_info["pooled"] is not pooled:
        raise SystemExit("bench: the pool was empty for a warm sample")


# --- local process -----------------------------------------------------------------------


async def bench_local(report: Report, samples: int = 40) -> None:
    for label, argv, numbered in (("example bash worker", EXAMPLE_WORKER, True),
                                  ("minimal sh worker", MINIMAL_WORKER, False)):  # fmt: skip
        runner = LocalProcessRunner(argv)
        ours, bare = [], []
        for n in range(samples + 3):  # the first three warm caches up, for both
            call = request("echo", {"text": "hello"}, n if numbered else 0)
            mine = await timed(run_ok, runner, call)
            theirs = await timed(run_cli, argv, codec.encode(call))
            if n >= 3:
                ours.append(mine)
                bare.append(theirs)
        name = f"local-process runner, per call ({label})"
        row = compared(name, ours, "subprocess.run, same worker+envelope", bare, 1.10)
        if not numbered:  # a worker that does nothing: the difference is the runner alone
            row.target, row.met = "", None
            row.note = (f"the runner's own cost: {row.median - (row.baseline_median or 0):.2f}"
                        " ms per call (process group, rlimits via prlimit, temporary directory,"
                        " caps, deadline, result validation)")  # fmt: skip
        report.rows.append(row)


# --- Docker ------------------------------------------------------------------------------


def docker_run_argv(limits: ContainerLimits, image: str) -> list[str]:
    """`docker run --rm -i` with the flags DockerRunner gives a container."""
    argv = ["docker", "run", "--rm", "-i", "--network", limits.network, "--read-only",
            "--tmpfs", f"/tmp:rw,nosuid,nodev,size={limits.tmpfs_bytes},mode=1777",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--memory", str(limits.memory_bytes), "--memory-swap", str(limits.memory_bytes),
            "--cpus", str(limits.cpus), "--pids-limit", str(limits.pids),
            "--shm-size", str(limits.shm_bytes),
            "--ulimit", f"nofile={limits.open_files}:{limits.open_files}",
            "--ulimit", f"fsize={limits.file_size_bytes}:{limits.file_size_bytes}",
            "--ulimit", "core=0:0", "--init", "--ipc", "private", "--log-driver", "none",
            "--user", limits.user, "--workdir", "/tmp", "--hostname", "sandbox"]  # fmt: skip
    if limits.seccomp_profile:
        argv += ["--security-opt", f"seccomp={DEFAULT_SECCOMP_PROFILE}"]
    return [*argv, image]


async def bench_docker(report: Report, want_pool: bool, want_cold: bool, samples: int = 12) -> None:
    limits = ContainerLimits()
    cold = DockerRunner(BASH_IMAGE, limits)
    cli = docker_run_argv(limits, BASH_IMAGE)
    ours, pooled, bare = [], [], []
    async with WarmPool(PoolSettings(size=1)) as pool:
        warm = pool.pooled(DockerRunner(BASH_IMAGE, limits))
        for n in range(samples + 1):
            call = request("bash", {"script": "echo hi"}, n)
            sample = [await timed(run_cli, cli, codec.encode(call))]
            sample.append(await timed(run_ok, cold, call) if want_cold else 0.0)
            if want_pool:
                await pool.filled(60)  # warm means: a container is waiting for this call
                sample.append(await timed(run_ok, warm, call, True))
            if n >= 1:
                bare.append(sample[0])
                ours.append(sample[1])
                pooled.append(sample[-1])
    if want_cold:
        report.rows.append(compared("Docker runner, cold, per call (bash-runner)", ours,
                                    "docker run --rm -i, same flags", bare, 0.90))  # fmt: skip
    if want_pool:
        report.rows.append(compared("Docker runner from the warm pool, per call", pooled,
                                    "docker run --rm -i, same flags", bare, 0.15))  # fmt: skip


def containers_left(api: docker.APIClient) -> int:
    labels = [f"{LABEL_MANAGED}=1", f"{LABEL_OWNER}={my_owner_token()}"]
    return len(api.containers(all=True, filters={"label": labels}))


async def bench_throughput(report: Report, api: docker.APIClient,
                           budget_s: float = 40.0) -> None:  # fmt: skip
    """Sustained isolated bash calls through the pool at each concurrency, against cold
    `docker run --rm -i` at the same concurrency (what the engine gives without a pool)."""
    cli = docker_run_argv(ContainerLimits(), BASH_IMAGE)
    for concurrency in (1, 4, 16):
        calls = max(8, 3 * concurrency)
        settings = PoolSettings(size=concurrency, refill_concurrency=min(concurrency, 4))
        latencies: list[float] = []
        async with WarmPool(settings) as pool:
            runner = pool.pooled(DockerRunner(BASH_IMAGE))
            await pool.filled(120)
            cpu_before, engine_before = _own_cpu_s(), _engine_cpu_s()
            caller = partial(call_until_done, runner, iter(range(calls)), latencies)
            elapsed, stopped = await _sustained(concurrency, budget_s, caller)
            rate = len(latencies) / elapsed
        cpu_ms = (_own_cpu_s() - cpu_before) * 1000 / max(1, len(latencies))
        engine_ms = (_engine_cpu_s() - engine_before) * 1000 / max(1, len(latencies))
        left = containers_left(api)
        bare: list[float] = []
        elapsed, bare_stopped = await _sustained(
            concurrency, budget_s, partial(cli_until_done, cli, iter(range(calls)), bare)
        )
        bare_rate = len(bare) / elapsed
        note = (f"{len(latencies)} pooled calls{stopped}, {len(bare)} docker runs{bare_stopped};"
                f" CPU per pooled call: this process {cpu_ms:.0f} ms, the engine's daemons"
                f" {engine_ms:.0f} ms;"
                f" containers left afterwards: {left}")  # fmt: skip
        target = "calls/s >= 20, left == 0" if concurrency == 16 else "left == 0"
        report.rows.append(Row(f"warm pool throughput, concurrency {concurrency}", "calls/s",
                               rate, rate, len(latencies), "docker run --rm -i, same concurrency",
                               bare_rate, bare_rate, rate / bare_rate, target,
                               left == 0 and (concurrency != 16 or rate >= 20), note))  # fmt: skip
        report.rows.append(Row(f"  call latency at concurrency {concurrency}", "ms",
                               statistics.median(latencies), p95(latencies), len(latencies),
                               "docker run latency", statistics.median(bare), p95(bare),
                               statistics.median(latencies) / statistics.median(bare)))  # fmt: skip


async def _sustained(
    concurrency: int, budget_s: float, caller: Callable[[], Awaitable[None]]
) -> tuple[float, str]:
    """Run `concurrency` callers until they are done; seconds taken, and a note when the
    time budget stopped them."""
    started = time.perf_counter()
    with anyio.move_on_after(budget_s) as budget:
        async with anyio.create_task_group() as group:
            for _ in range(concurrency):
                group.start_soon(caller)
    stopped = f" (stopped at {budget_s:g}s)" if budget.cancelled_caught else ""
    return time.perf_counter() - started, stopped


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


ENGINE_PROCESSES = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2")


def _engine_cpu_s() -> float:
    """CPU seconds of the engine's daemons (with their reaped children: runc, shims)
    on this machine, or 0 where /proc does not show them."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, fields = text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()
        if name in ENGINE_PROCESSES:
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


async def call_until_done(runner: Any, queue: Iterator[int], latencies: list[float]) -> None:
    """One of the concurrent callers: take the next call number until none is left."""
    for n in queue:
        latencies.append(await timed(run_ok, runner, request("bash", {"script": f"echo {n}"}, n)))


async def cli_until_done(cli: list[str], queue: Iterator[int], latencies: list[float]) -> None:
    for n in queue:
        payload = codec.encode(request("bash", {"script": f"echo {n}"}, n))
        latencies.append(await timed(anyio.to_thread.run_sync, _docker_run, cli, payload))


def _docker_run(cli: list[str], payload: bytes) -> None:
    done = subprocess.run(cli, input=payload, capture_output=True, check=True)
    json.loads(done.stdout)


# --- the report --------------------------------------------------------------------------


def machine(api: docker.APIClient) -> dict[str, Any]:
    version = api.version()
    return {
        "cores": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "docker": f"{version.get('Version')} (API {version.get('ApiVersion')})",
        "storage_driver": api.info().get("Driver"),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


async def main(only: tuple[str, ...], json_path: Path | None) -> int:
    try:
        api = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
        api.inspect_image(BASH_IMAGE)
    except docker.errors.DockerException as exc:
        print(f"bench: needs a Docker engine and the images ({exc}); run scripts/test first"
              " (it starts the engine and builds the images)", file=sys.stderr)  # fmt: skip
        return 2
    report = Report(machine(api))
    started = time.perf_counter()
    if "local" in only:
        await bench_local(report)
    if "docker" in only or "pool" in only:
        await bench_docker(report, want_pool="pool" in only, want_cold="docker" in only)
    if "runtimes" in only:  # runsc beside runc, cold and pooled (bench_runtimes.py)
        await bench_runtimes(report, api)
    if "throughput" in only:
        await bench_throughput(report, api)
    if "workers" in only:
        await bench_workers(report, api, docker_run_argv)
    if "sessions" in only:
        with tempfile.TemporaryDirectory(prefix="agents-runner-bench-") as directory:
            await bench_sessions(report, Path(directory))
    if "roundtrips" in only:  # store calls per continuation and per resume (the Engine)
        with tempfile.TemporaryDirectory(prefix="agents-runner-bench-") as directory:
            await bench_round_trips(report, Path(directory))
    if "postgres" in only:
        url = os.environ.get(POSTGRES_URL_VARIABLE)
        if not url:
            print(f"bench: the postgres rows need {POSTGRES_URL_VARIABLE} (scripts/bench sets"
                  " it to a throwaway cluster it starts)", file=sys.stderr)  # fmt: skip
            return 2
        with tempfile.TemporaryDirectory(prefix="agents-runner-bench-") as directory:
            await bench_postgres(report, url, Path(directory))
    if "server" in only:
        with tempfile.TemporaryDirectory(prefix="agents-runner-bench-") as directory:
            await bench_server(report, Path(directory))
    if "events" in only:
        with tempfile.TemporaryDirectory(prefix="agents-runner-bench-") as directory:
            await bench_events(report, Path(directory))
    if "claims" in only:
        with tempfile.TemporaryDirectory(prefix="agents-runner-bench-") as directory:
            await bench_claims(report, Path(directory))
    if "bodies" in only:  # hostile JSON bodies: the reader and the server (bench_bodies.py)
        with tempfile.TemporaryDirectory(prefix="agents-runner-bench-") as directory:
            await anyio.to_thread.run_sync(bench_bodies, report, Path(directory))
    if "wire" in only:  # envelopes.wire's _json against plain json (bench_wire.py)
        await anyio.to_thread.run_sync(bench_wire, report)
    report.machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report.machine["seconds"] = round(time.perf_counter() - started, 1)
    document = {"machine": report.machine, "rows": [asdict(r) for r in report.rows]}
    if json_path == STDOUT:  # the rows as JSON instead of the table (the table on stderr)
        print(render(report), file=sys.stderr)
        print(json.dumps(document, indent=2))
        return 0
    print(render(report))
    if json_path is not None:  # scripts/gen-performance turns this file into docs tables
        json_path.write_text(json.dumps(document, indent=2) + "\n")  # noqa: ASYNC240  at exit
    return 0


def parse(argv: list[str]) -> tuple[tuple[str, ...], Path | None]:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, metavar="FILE",
                        help="also write the rows as JSON (-: on stdout)")  # fmt: skip
    parser.add_argument("--only", default=",".join(ROWS),
                        help=f"comma-separated subset of: {', '.join(ROWS)}")  # fmt: skip
    args = parser.parse_args(argv)
    only = tuple(name.strip() for name in args.only.split(",") if name.strip())
    unknown = sorted(set(only) - set(ROWS))
    if unknown:
        parser.error(f"--only: unknown row group(s) {', '.join(unknown)}; known: {', '.join(ROWS)}")
    return only, args.json


if __name__ == "__main__":
    sys.exit(anyio.run(main, *parse(sys.argv[1:])))
