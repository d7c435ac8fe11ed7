"""scripts/bench's `runtimes` rows: a bash call under gVisor (runsc) beside the same call
under runc, cold (create + start per call) and from the warm pool, interleaved sample by
sample so a busy machine slows both alike; the ratio is runsc's median over runc's.

The rows are informational (no target): gVisor buys a user-space kernel between the
worker and the host's with start-up time and syscall cost. Needs runsc registered with
the engine (scripts/lib/engine.sh's ensure_runsc_runtime, which scripts/test runs)."""

from __future__ import annotations

from typing import Any

import docker
from benchkit import Report, Row, compared, request, timed

from runner.isolation import ContainerLimits, DockerRunner, PoolSettings, WarmPool

BASH_IMAGE = "agents-runner/bash-runner:latest"
RUNTIMES = ("runc", "runsc")


async def _ok(runner: Any, call: Any) -> None:
    outcome = await runner.call(call)
    if not outcome.ok:
        raise SystemExit(f"bench: a call failed: {outcome.result.error}")


async def bench_runtimes(report: Report, api: docker.APIClient, samples: int = 12) -> None:
    if "runsc" not in (api.info().get("Runtimes") or {}):
        report.rows.append(Row("runsc rows skipped", "", 0.0, 0.0, 0,
                               note="the engine has no runsc: run scripts/lib/engine.sh's"
                                    " ensure_runsc_runtime (scripts/test does)"))  # fmt: skip
        return
    cold = {rt: DockerRunner(BASH_IMAGE, ContainerLimits(runtime=rt)) for rt in RUNTIMES}
    times: dict[tuple[str, str], list[float]] = {(k, rt): [] for k in ("cold", "warm")
                                                 for rt in RUNTIMES}  # fmt: skip
    async with WarmPool(PoolSettings(size=1)) as pool:
        warm = {rt: pool.pooled(DockerRunner(BASH_IMAGE, ContainerLimits(runtime=rt)))
                for rt in RUNTIMES}  # fmt: skip
        for n in range(samples + 1):  # the first round warms caches and is not counted
            for rt in RUNTIMES:
                call = request("bash", {"script": "echo hi"}, n)
                took_cold = await timed(_ok, cold[rt], call)
                await pool.filled(120)  # warm means: a container is waiting for this call
                took_warm = await timed(_ok, warm[rt], call)
                if n >= 1:
                    times["cold", rt].append(took_cold)
                    times["warm", rt].append(took_warm)
    for runner in cold.values():
        await runner.aclose()
    for kind, label in (("cold", "cold"), ("warm", "from the warm pool")):
        row = compared(f"Docker runner under runsc, {label}, per call", times[kind, "runsc"],
                       "the same under runc", times[kind, "runc"], 0.0)  # fmt: skip
        row.target, row.met = "", None
        row.note = "gVisor's cost: its sandbox start (cold) and its syscall path (both)"
        report.rows.append(row)
