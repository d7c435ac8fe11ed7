"""scripts/bench rows for the workers and the engine's limit (`--only workers`).

- cold Docker runner (bash-runner, every hardening default) against what a user would
  type instead: hardened `docker run --rm -i` of the plain base image, `bash -c 'echo hi'`
  (no worker, no envelope);
- the engine's floor at concurrency 16 (create/start/wait/remove of a no-op container in
  the base image, same hardening) against sustained warm-pool throughput at 16, with the
  CPU of each call split by process: this process, dockerd, containerd, the shims (with
  the runc processes they reaped) and the container itself (its cgroup's cpuacct);
- the worker's start CPU against a bare `python3 -I -c pass` in the same image.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import docker
from benchkit import Report, Row, compared, timed
from benchkit import request as bench_request

from envelopes.v1 import ToolCallRequest
from runner.isolation import ContainerLimits, DockerRunner, PoolSettings, WarmPool
from runner.isolation.containers import LABEL_OWNER, labels_for, my_owner_token

BASH_IMAGE = "agents-runner/bash-runner:latest"
PYTHON_IMAGE = "agents-runner/python-runner:latest"
#: The images' base, in the order scripts/build-images picks it.
BASE_CANDIDATES = ("debian:bookworm-slim", "agents-runner/base:bookworm")
CONCURRENCY = 16
ENGINE = ("dockerd", "containerd")
SHIM = "containerd-shim"  # /proc/<pid>/comm is cut at 15 characters
#: Where cgroup v1 (this machine) and v2 keep a container's CPU, in nanoseconds / usec.
CGROUP_V1 = "/sys/fs/cgroup/cpuacct/docker/{id}/cpuacct.usage"
CGROUP_V2 = "/sys/fs/cgroup/system.slice/docker-{id}.scope/cpu.stat"


def request(tool: str, arguments: dict[str, Any], n: int = 0) -> ToolCallRequest:
    return bench_request(tool, arguments, n, deadline_s=120)


def base_image(api: docker.APIClient) -> str:
    chosen = os.environ.get("AGENTS_RUNNER_BASE")
    for image in (chosen,) if chosen else BASE_CANDIDATES:
        try:
            api.inspect_image(image)
            return image
        except docker.errors.ImageNotFound:
            continue
    raise SystemExit(f"bench: no base image ({', '.join(BASE_CANDIDATES)});"
                     " run scripts/build-images")  # fmt: skip


async def bench_workers(
    report: Report, api: docker.APIClient,
    docker_run_argv: Callable[[ContainerLimits, str], list[str]],
) -> None:  # fmt: skip
    base = base_image(api)
    await _cold_against_plain_docker_run(report, base, docker_run_argv)
    await _pool_against_docker_exec(report, base, docker_run_argv)
    await _pool_against_engine_floor(report, base)
    for image, tool in ((BASH_IMAGE, "bash"), (PYTHON_IMAGE, "python")):
        _worker_start_cpu(report, image, tool)


# --- cold runner against plain docker run ------------------------------------------------


async def _cold_against_plain_docker_run(
    report: Report, base: str, docker_run_argv: Callable[[ContainerLimits, str], list[str]],
    samples: int = 12,
) -> None:  # fmt: skip
    limits = ContainerLimits()
    cold = DockerRunner(BASH_IMAGE, limits)
    plain = [*docker_run_argv(limits, base), "bash", "-c", "echo hi"]
    ours, theirs = [], []
    for n in range(samples + 1):  # the first of each warms caches up
        call = request("bash", {"script": "echo hi"}, n)
        mine = await timed(_call_ok, cold, call)
        bare = await timed(anyio.to_thread.run_sync, _plain_run, plain)
        if n:
            ours.append(mine)
            theirs.append(bare)
    await cold.aclose()
    row = compared("Docker runner, cold, per call (bash-runner)", ours,
                   f"docker run --rm -i hardened, {base}, bash -c", theirs, 0.80)  # fmt: skip
    row.note = (
        "both pay create, start, attach and remove through the engine; ours also"
        " starts the Python worker and checks the envelope both ways"
    )
    report.rows.append(row)


async def _pool_against_docker_exec(
    report: Report, base: str, docker_run_argv: Callable[[ContainerLimits, str], list[str]],
    samples: int = 12,
) -> None:  # fmt: skip
    """The warm pool per call against `docker exec` into a running container with the same
    hardening (what a user keeping one sandbox alive would do, without a fresh one each
    call): both skip the container's create and start."""
    limits = ContainerLimits()
    argv = docker_run_argv(limits, base)
    detached = [*argv[:2], "-d", *argv[4:-1], "--entrypoint", "sleep", base, "infinity"]
    started = await anyio.run_process(detached)
    cid = started.stdout.decode().strip()
    exec_argv = ["docker", "exec", "-i", cid, "bash", "-c", "echo hi"]
    pooled, theirs = [], []
    try:
        async with WarmPool(PoolSettings(size=1)) as pool:
            warm = pool.pooled(DockerRunner(BASH_IMAGE, limits))
            for n in range(samples + 1):  # the first of each warms caches up
                await pool.filled(60)  # warm means: a container is waiting for this call
                mine = await timed(_call_ok, warm, request("bash", {"script": "echo hi"}, n))
                bare = await timed(anyio.to_thread.run_sync, _plain_run, exec_argv)
                if n:
                    pooled.append(mine)
                    theirs.append(bare)
    finally:
        await anyio.run_process(["docker", "rm", "-f", cid], check=False)
    row = compared("Docker runner from the warm pool, per call", pooled,
                   f"docker exec -i into a running hardened {base}, bash -c", theirs,
                   0.60)  # fmt: skip
    row.note = "ours hands the call to a fresh, already started container and removes it"
    report.rows.append(row)


def _plain_run(argv: list[str]) -> None:
    done = subprocess.run(argv, input=b"", capture_output=True, check=True)
    if done.stdout != b"hi\n":
        raise SystemExit(f"bench: plain docker run said {done.stdout!r}")


async def _call_ok(runner: Any, call: ToolCallRequest) -> None:
    outcome = await runner.call(call)
    if not outcome.ok:
        raise SystemExit(f"bench: a call failed: {outcome.result.error}")


# --- the engine's floor against the pool, at concurrency 16 ------------------------------


async def _pool_against_engine_floor(report: Report, base: str, calls: int = 96) -> None:
    limits = ContainerLimits()
    api = docker.APIClient(version="auto", max_pool_size=CONCURRENCY * 2,
                           **docker.utils.kwargs_from_env())  # fmt: skip
    host_config = limits.host_config(api)

    def no_op_container() -> None:
        created = api.create_container(
            base, command=["true"], user=limits.user, working_dir="/tmp",
            network_disabled=True, labels=labels_for("bench-floor"), host_config=host_config,
        )  # fmt: skip
        try:
            api.start(created["Id"])
            if api.wait(created["Id"])["StatusCode"] != 0:
                raise SystemExit("bench: the no-op container failed")
        finally:
            api.remove_container(created["Id"], force=True)

    async def floor_caller(queue: Iterator[int], done: list[float]) -> None:
        for _ in queue:
            done.append(await timed(anyio.to_thread.run_sync, no_op_container))

    floor: list[float] = []
    with CpuSplit(api) as floor_cpu:
        floor_s = await _concurrently(lambda: floor_caller(iter(range(calls)), floor))
    floor_rate = len(floor) / floor_s

    pooled: list[float] = []
    settings = PoolSettings(size=CONCURRENCY, refill_concurrency=CONCURRENCY)
    async with WarmPool(settings) as pool:
        runner = pool.pooled(DockerRunner(BASH_IMAGE, limits))
        await pool.filled(180)
        queue = iter(range(calls))

        async def pooled_caller() -> None:
            for n in queue:
                call = request("bash", {"script": f"echo {n}"}, n)
                pooled.append(await timed(_call_ok, runner, call))

        with CpuSplit(api) as pool_cpu:
            pool_s = await _concurrently(pooled_caller)
    pool_rate = len(pooled) / pool_s
    api.close()
    met = pool_rate / floor_rate >= 0.90 and pool_rate >= 12
    report.rows.append(Row(
        f"warm pool sustained, concurrency {CONCURRENCY}", "calls/s", pool_rate, pool_rate,
        len(pooled), f"engine floor: no-op container create/start/wait/remove, {base}",
        floor_rate, floor_rate, pool_rate / floor_rate, "ratio >= 0.9, calls/s >= 12", met,
        f"CPU per pooled call: {pool_cpu.describe(len(pooled))}; per floor container:"
        f" {floor_cpu.describe(len(floor))}",
        detail={"cpu_ms_per_call": {"pooled": pool_cpu.per_call(len(pooled)),
                                    "floor": floor_cpu.per_call(len(floor))},
                "pool": {"size": settings.size, "refill_concurrency": settings.refill_concurrency}},
    ))  # fmt: skip
    report.rows.append(Row(
        f"  call latency, pool at concurrency {CONCURRENCY}", "ms", statistics.median(pooled),
        _p95(pooled), len(pooled), "no-op container latency, same concurrency",
        statistics.median(floor), _p95(floor), statistics.median(pooled) / statistics.median(floor),
    ))  # fmt: skip


async def _concurrently(caller: Callable[[], Any]) -> float:
    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(CONCURRENCY):
            group.start_soon(caller)
    return time.perf_counter() - started


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


class CpuSplit:
    """CPU seconds spent while it is entered, by process: this one (less its own
    sampling threads), dockerd, containerd, the shims (read from /proc every few ms
    until each exits, with the runc processes they reaped), and our containers (their
    cgroup's cpuacct, read until the cgroup goes away; the ids come from the engine's
    event stream, filtered on this process's owner label)."""

    def __init__(self, api: docker.APIClient, every_s: float = 0.05) -> None:
        self.api, self.every_s = api, every_s
        self.containers: dict[str, float] = {}
        self.shims: dict[int, list[float]] = {}  # pid: [first seen, last seen]
        self.daemons: dict[str, float] = {}
        self.own = self.sampler_cpu = 0.0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._events: Any = None

    def __enter__(self) -> CpuSplit:
        for pid, _ in _processes(SHIM):
            self.shims[pid] = [_proc_cpu(pid)] * 2
        self.daemons = {name: -_sum_cpu(name) for name in ENGINE}
        since = time.time() - 1
        self._events = self.api.events(
            since=since, decode=True,
            filters={"type": "container", "event": "create",
                     "label": f"{LABEL_OWNER}={my_owner_token()}"},
        )  # fmt: skip
        self._threads = [threading.Thread(target=t, daemon=True)
                         for t in (self._follow_events, self._sample)]  # fmt: skip
        for thread in self._threads:
            thread.start()
        self.own = -_own_cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        self.own += _own_cpu()
        for name in ENGINE:
            self.daemons[name] += _sum_cpu(name)
        time.sleep(self.every_s * 3)  # let the last cgroups and shims be read
        self._stop.set()
        self._events.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _follow_events(self) -> None:
        started = time.thread_time()
        try:
            for event in self._events:
                self.containers.setdefault(event["id"], 0.0)
        except Exception:  # the stream closed under us at __exit__: that is the end
            pass
        self.sampler_cpu += time.thread_time() - started

    def _sample(self) -> None:
        started = time.thread_time()
        while not self._stop.wait(self.every_s):
            for cid in list(self.containers):
                usage = _cgroup_cpu(cid)
                if usage is not None:
                    self.containers[cid] = usage
            for pid, cpu in _processes(SHIM):
                self.shims.setdefault(pid, [0.0, cpu])[1] = cpu
        self.sampler_cpu += time.thread_time() - started

    def per_call(self, calls: int) -> dict[str, float]:
        """Milliseconds of CPU per call, by process."""
        shims = sum(last - first for first, last in self.shims.values())
        split = {"this process": self.own - self.sampler_cpu, **self.daemons,
                 "shims": shims, "container": sum(self.containers.values())}  # fmt: skip
        return {name: round(seconds * 1000 / max(1, calls), 1) for name, seconds in split.items()}

    def describe(self, calls: int) -> str:
        split = self.per_call(calls)
        parts = ", ".join(f"{name} {ms:.0f}" for name, ms in split.items())
        return f"{parts} (total {sum(split.values()):.0f} ms)"


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def _proc_cpu(pid: int) -> float:
    """utime + stime + cutime + cstime of `pid`, in seconds (0 once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text.rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _processes(name: str) -> Iterator[tuple[int, float]]:
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            comm = Path(entry.path, "comm").read_text().strip()
        except OSError:
            continue
        if comm == name:
            cpu = _proc_cpu(int(entry.name))
            if cpu:
                yield int(entry.name), cpu


def _sum_cpu(name: str) -> float:
    return sum(cpu for _, cpu in _processes(name))


def _cgroup_cpu(cid: str) -> float | None:
    try:
        return int(Path(CGROUP_V1.format(id=cid)).read_text()) / 1e9
    except OSError:
        pass
    try:
        stat = Path(CGROUP_V2.format(id=cid)).read_text().split()
    except OSError:
        return None
    return int(stat[stat.index("usage_usec") + 1]) / 1e6


# --- worker start CPU, inside the image --------------------------------------------------

#: Run inside the image: median CPU (user + system, children) of N runs of each command.
_MEASURE = r"""
import json, resource, subprocess, sys, time
n, tool = int(sys.argv[1]), sys.argv[2]
py = "/opt/agents-runner/venv/bin/python"
worker = [py, "-I", "-B", "/opt/agents-runner/worker.py"]
args = {"script": "echo hi"} if tool == "bash" else {"code": "print('hi')"}
child = ["bash", "-c", "echo hi"] if tool == "bash" else [py, "-I", "-c", "print('hi')"]
call = json.dumps({"kind": "ToolCallRequest", "version": "1.0", "id": "c1",
    "tool": {"name": tool}, "arguments": args, "deadline_ms": int(time.time() * 1000) + 600000,
    "limits": {"max_result_bytes": 65536}}).encode()
describe = b'{"kind":"DescribeRequest","version":"1.0"}'
def cpu(argv, data):
    spent = []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(argv, input=data, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0 or (argv is worker and b'"status":"error"' in done.stdout):
            sys.exit(f"{argv}: {done.returncode} {done.stdout[:300]!r} {done.stderr[-300:]!r}")
        spent.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
    return spent
rows = {}
for _ in range(2):  # interleaved rounds: a busy moment slows every command alike
    for name, argv, data in (("bare", ["python3", "-I", "-c", "pass"], b""),
                             ("describe", worker, describe), ("call", worker, call),
                             ("child", child, b"")):
        rows.setdefault(name, []).extend(cpu(argv, data))
print(json.dumps(rows))
"""


def _worker_start_cpu(report: Report, image: str, tool: str, runs: int = 15) -> None:
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint",
         "/opt/agents-runner/venv/bin/python", image, "-I", "-c", _MEASURE, str(runs), tool],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"bench: measuring the worker in {image} failed: {done.stderr[-800:]}")
    cpu = json.loads(done.stdout)
    name = image.split("/")[-1].split(":")[0]
    row = compared(f"worker start CPU, {name} (describe)", cpu["describe"],
                   "python3 -I -c pass, same image", cpu["bare"], 1.5)  # fmt: skip
    row.unit = "ms CPU"
    call_over = statistics.median(cpu["call"]) - statistics.median(cpu["child"])
    extra = call_over - statistics.median(cpu["bare"])
    row.note = (f"one `{tool}` call costs {statistics.median(cpu['call']):.1f} ms CPU, of which"
                f" the child (`{' '.join(_CHILD[tool])}`) {statistics.median(cpu['child']):.1f};"
                f" the worker itself {extra:.1f} ms over a bare interpreter"
                " (target <= 15)")  # fmt: skip
    report.rows.append(row)


_CHILD = {"bash": ("bash", "-c", "'echo hi'"), "python": ("python", "-I", "-c", "...")}
