"""`agents-runner isolate`, `describe` and `sweep`: one call through a runner."""

from __future__ import annotations

import re
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Annotated

import anyio
import typer
from pydantic import ValidationError

from envelopes import codec, controls, wire
from envelopes.rules import LATEST_VERSION
from envelopes.v1 import MAX_REQUEST_BYTES, SUPPORTED_VERSIONS, VERSION, ToolCallRequest
from runner.cli.app import app, fail
from runner.cli.common import parse_audit_option
from runner.cli.settings import IsolateSettings, current, env_name
from runner.cli.transfer import print_event, with_files, write_returned
from runner.isolation import (
    CallOutcome,
    ContainerLimits,
    DescribeOutcome,
    DockerRunner,
    EgressPolicy,
    EngineUnavailable,
    LocalProcessRunner,
    ProcessLimits,
    WorkerEvent,
    sweep_containers,
)
from runner.isolation.audit import (
    AuditedRunner,
    AuditError,
    AuditFailed,
    AuditSink,
    JsonLinesAuditSink,
)
from runner.isolation.base import ExchangeRunner
from runner.session.audit import AuditSetting

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = MappingProxyType({"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4})


def parse_size(text: str, option: str) -> int:
    """`512m`, `1g`, `65536` -> bytes."""
    match = _SIZE.match(text)
    if not match:
        fail(f"{option}: {text!r} is not a size (examples: 65536, 512k, 256m, 1g)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            fail(f"--env: expected NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


RunnerKind = Annotated[str, typer.Option("--runner", help="local or docker")]
Image = Annotated[str | None, typer.Option("--image", help="image for --runner docker")]
Argv = Annotated[list[str] | None, typer.Argument(help="worker argv for --runner local")]
Memory = Annotated[str | None, typer.Option("--memory", help="memory limit, e.g. 512m")]
Cpus = Annotated[float | None, typer.Option("--cpus", help="CPU quota, e.g. 1.5")]
Pids = Annotated[int | None, typer.Option("--pids", help="max processes in the container")]
Network = Annotated[
    str | None, typer.Option("--network", help="Docker network to join (default: none)")
]
Tmpfs = Annotated[str | None, typer.Option("--tmpfs-size", help="size of /tmp, e.g. 64m")]
User = Annotated[str | None, typer.Option("--user", help="uid:gid in the container")]
Env = Annotated[list[str] | None, typer.Option("--env", help="NAME=VALUE for the worker")]
EnvAllow = Annotated[
    list[str] | None, typer.Option("--env-allow", help="pass this variable through (local)")
]
ContainerRuntime = Annotated[
    str | None,
    typer.Option("--runtime", help="the engine's runtime for the container: runc (default) or"
                 " runsc (gVisor; scripts/lib/engine.sh registers it)"),
]  # fmt: skip
EgressAllow = Annotated[
    list[str] | None,
    typer.Option("--egress-allow", metavar="HOST:PORT",
                 help="let the container reach HOST:PORT (or *.DOMAIN:PORT) through its own"
                 " egress proxy, and nothing else; repeatable (default: no network)"),
]  # fmt: skip
EgressNetwork = Annotated[
    str | None,
    typer.Option("--egress-network", envvar=env_name("egress_network"),
                 help="the Docker network the egress proxy reaches the allowed hosts through"
                 " ('bridge': Docker's default route out)"),
]  # fmt: skip


def egress_policy(allow: list[str] | None, network: str | None) -> EgressPolicy | None:
    """The policy of --egress-allow / --egress-network (None without an allow-list)."""
    if not allow:
        return None
    try:
        return EgressPolicy(tuple(allow), upstream_network=network)
    except ValueError as exc:
        raise ValueError(f"--egress-allow / --egress-network: {exc}") from None


def build_runner(
    runner: str,
    image: str | None,
    argv: list[str] | None,
    *,
    memory: str | None = None,
    cpus: float | None = None,
    pids: int | None = None,
    network: str | None = None,
    tmpfs: str | None = None,
    user: str | None = None,
    env: list[str] | None = None,
    env_allow: list[str] | None = None,
    runtime: str | None = None,
    egress_allow: list[str] | None = None,
    egress_network: str | None = None,
) -> ExchangeRunner:
    variables = parse_env(env or [])
    if runner == "local":
        if image:
            fail("--image is for --runner docker; give the worker's argv after --")
        if not argv:
            fail("--runner local needs the worker's argv after --, e.g. -- python3 worker.py")
        docker_only = {"--cpus": cpus, "--pids": pids, "--network": network,
                       "--tmpfs-size": tmpfs, "--user": user, "--runtime": runtime,
                       "--egress-allow": egress_allow or None}  # fmt: skip
        for option, value in docker_only.items():
            if value is not None:
                fail(f"{option} applies to --runner docker only")
        process_limits = ProcessLimits()
        if memory is not None:
            process_limits = ProcessLimits(address_space_bytes=parse_size(memory, "--memory"))
        return LocalProcessRunner(argv, process_limits, env_allow=env_allow or [], env=variables)
    if runner == "docker":
        if not image:
            fail("--runner docker needs --image IMAGE")
        if argv:
            fail("--runner docker takes no argv; the image's entrypoint is the worker")
        if env_allow:
            fail("--env-allow applies to --runner local only; use --env NAME=VALUE")
        default = ContainerLimits()
        try:
            limits = ContainerLimits(
                memory_bytes=default.memory_bytes if memory is None
                else parse_size(memory, "--memory"),
                tmpfs_bytes=default.tmpfs_bytes if tmpfs is None
                else parse_size(tmpfs, "--tmpfs-size"),
                cpus=default.cpus if cpus is None else cpus,
                pids=default.pids if pids is None else pids,
                network=default.network if network is None else network,
                user=default.user if user is None else user,
                env=variables,
                runtime=default.runtime if runtime is None else runtime,
                egress=egress_policy(egress_allow, egress_network),
            )  # fmt: skip
        except ValueError as exc:
            fail(str(exc))
        return DockerRunner(image, limits)
    fail(f"--runner: expected 'local' or 'docker', got {runner!r}")


#: The seconds a request without `deadline_ms` (or a shortcut's) gets when no --timeout.
DEFAULT_TIMEOUT_S = 30.0

#: The result size limit of a shortcut's request (`--bash`, `--python`, `--script`).
SHORTCUT_MAX_RESULT_BYTES = 1024 * 1024

#: The image each shortcut runs in when neither --runner nor --image is given.
SHORTCUT_IMAGES = MappingProxyType(
    {"bash": "agents-runner/bash-runner:latest", "python": "agents-runner/python-runner:latest"}
)
#: The argument each runner image's tool takes its source in.
_SOURCE_ARGUMENT = MappingProxyType({"bash": "script", "python": "code"})


def shortcut_tool(bash: str | None, python: str | None, script: Path | None) -> str | None:
    """The tool `--bash`, `--python` or `--script FILE` (.py: python, else bash) asks for."""
    given = [name for name, value in (("--bash", bash), ("--python", python),
                                      ("--script", script)) if value is not None]  # fmt: skip
    if len(given) > 1:
        fail(f"give one of --bash, --python and --script, not {' and '.join(given)}")
    if bash is not None:
        return "bash"
    if python is not None:
        return "python"
    if script is not None:
        return "python" if script.suffix == ".py" else "bash"
    return None


def shortcut_request(
    tool: str, source: str | None, script: Path | None, stdin_text: str | None
) -> bytes:
    """The request a shortcut stands for, as bytes a file could hold (no deadline yet)."""
    if script is not None:
        try:
            source = script.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"--script: cannot read {script}: {getattr(exc, 'strerror', None) or exc}")
    assert source is not None
    arguments = {_SOURCE_ARGUMENT[tool]: source}
    if stdin_text is not None:
        arguments["stdin"] = stdin_text
    document = {"kind": "ToolCallRequest", "version": "1.0", "id": f"cli-{uuid.uuid4().hex[:12]}",
                "tool": {"name": tool}, "arguments": arguments,
                "limits": {"max_result_bytes": SHORTCUT_MAX_RESULT_BYTES}}  # fmt: skip
    return wire.dumps(document)


def _with_deadline(data: bytes, seconds: float) -> bytes:
    """`data` with `deadline_ms` set `seconds` from now when a ToolCallRequest lacks it
    (the envelope requires it: the CLI fills it in); anything else is left as it is, for
    decode_request to judge."""
    try:
        doc = wire.loads(data, max_bytes=MAX_REQUEST_BYTES)
    except wire.WireError:
        return data
    if doc.get("kind") != "ToolCallRequest" or "deadline_ms" in doc:
        return data
    return wire.dumps({**doc, "deadline_ms": int((time.time() + seconds) * 1000)})


def read_request(
    path: Path | None,
    timeout: float | None,
    max_result: str | None,
    data: bytes | None = None,
) -> ToolCallRequest:
    """The request of `data` (a shortcut's), `path` or stdin. Without `deadline_ms` it
    gets one `timeout` (default 30 s) from now; with one in the past and no --timeout it
    is refused, saying why (a saved request goes stale: the deadline is absolute)."""
    where = "the command line" if data is not None else str(path) if path else "stdin"
    if timeout is not None and timeout <= 0:
        fail(f"--timeout must be positive, got {timeout}")
    if data is None:
        try:
            data = path.read_bytes() if path else sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
        except OSError as exc:
            fail(f"--request: cannot read {where}: {exc.strerror}")
    data = _with_deadline(data, DEFAULT_TIMEOUT_S if timeout is None else timeout)
    try:
        request = codec.decode_request(data)
    except codec.RequestError as exc:
        fail(f"request on {where}: {exc.message}")
    if not isinstance(request, ToolCallRequest):
        fail(f"request on {where}: expected a ToolCallRequest (use `describe` for DescribeRequest)")
    late_s = time.time() - request.deadline_ms / 1000
    if timeout is None and late_s >= 0:
        fail(f"request on {where}: deadline_ms {request.deadline_ms} passed {late_s:.0f} s ago"
             " (it is absolute, epoch milliseconds, so a saved request goes stale): give"
             " --timeout SECONDS to set it from now, or leave deadline_ms out"
             f" ({DEFAULT_TIMEOUT_S:.0f} s)")  # fmt: skip
    if timeout is None and max_result is None:
        return request
    doc = request.to_wire()
    if timeout is not None:
        doc["deadline_ms"] = int((time.time() + timeout) * 1000)
    if max_result is not None:
        doc["limits"]["max_result_bytes"] = parse_size(max_result, "--max-result-bytes")
    try:
        return ToolCallRequest.model_validate(doc)
    except ValidationError as exc:
        fail(f"request after overrides: {codec.describe_validation_error(exc)}")


def exit_code_note(outcome: CallOutcome) -> str | None:
    """A line saying that the program the call ran exited non-zero, when its `ok` result
    says so (the bash and python runners' `exit_code`): the call itself succeeded, so
    `isolate` exits 0, and a person reading only the exit status would miss it."""
    output = outcome.result.output
    if not outcome.ok or output is None or output.type != "json":
        return None
    content = output.content
    code = content.get("exit_code") if isinstance(content, dict) else None
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        return (f"note: the program exited with status {code} (output.content.exit_code);"
                " the call itself is ok")  # fmt: skip
    return None


def _quiet(event: WorkerEvent) -> None:
    """Events asked for without --stream: only so that a killed call keeps the end of
    what it printed (`error.output_tail`); none is shown."""


def _isolate_fail_mode(value: AuditSetting | None) -> AuditSetting | None:
    """`--audit`'s setting, failing closed when AGENTS_RUNNER_AUDIT_FAIL says so."""
    if value is None:
        return None
    return replace(value, fail_closed=current(IsolateSettings).fail_closed)


IsolateAudit = Annotated[
    AuditSetting | None,
    typer.Option("--audit", envvar=env_name("audit"), parser=parse_audit_option,
                 callback=_isolate_fail_mode, metavar="WHERE",
                 help="append the call's audit record to a JSON-lines file: file:PATH"
                      " (default: off, as `isolate` has no store)"),
]  # fmt: skip


def _isolate_audit(setting: AuditSetting | None) -> AuditSink | None:
    """The audit file `--audit` names; `isolate` has no store, so `store` is refused."""
    if setting is None or setting.to == "off":
        return None
    if setting.to == "store":
        fail("--audit store: `isolate` uses no store; give --audit file:PATH (or off)")
    assert setting.path is not None
    try:
        return JsonLinesAuditSink(setting.path)
    except AuditError as exc:
        fail(f"--audit: {exc}")


@app.command()
def isolate(
    runner: Annotated[
        str | None,
        typer.Option("--runner", help="local or docker (default with --bash, --python or"
                     " --script: docker)"),
    ] = None,
    argv: Argv = None,
    image: Image = None,
    request: Annotated[
        Path | None, typer.Option("--request", help="read the request from FILE, not stdin")
    ] = None,
    bash: Annotated[
        str | None,
        typer.Option("--bash", metavar="SCRIPT",
                     help="run SCRIPT with the bash-runner's `bash` tool, no request needed"
                          " (default image agents-runner/bash-runner:latest)"),
    ] = None,
    python: Annotated[
        str | None,
        typer.Option("--python", metavar="CODE",
                     help="run CODE with the python-runner's `python` tool (default image"
                          " agents-runner/python-runner:latest)"),
    ] = None,
    script: Annotated[
        Path | None,
        typer.Option("--script", metavar="FILE",
                     help="run the script in FILE: as --python when it ends in .py, else"
                          " as --bash"),
    ] = None,
    stdin_text: Annotated[
        str | None,
        typer.Option("--stdin", metavar="TEXT", help="with --bash, --python or --script:"
                     " the program's standard input"),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", help="seconds from now: replaces deadline_ms, or sets it"
                     " when the request has none (default 30)"),
    ] = None,
    max_result_bytes: Annotated[
        str | None, typer.Option("--max-result-bytes", help="replaces limits.max_result_bytes")
    ] = None,
    memory: Memory = None,
    cpus: Cpus = None,
    pids: Pids = None,
    network: Network = None,
    tmpfs_size: Tmpfs = None,
    user: User = None,
    env: Env = None,
    env_allow: EnvAllow = None,
    runtime: ContainerRuntime = None,
    egress_allow: EgressAllow = None,
    egress_network: EgressNetwork = None,
    audit: IsolateAudit = None,
    full: Annotated[
        bool, typer.Option("--json", help="print the full typed outcome, not just the result")
    ] = False,
    files: Annotated[
        list[str] | None,
        typer.Option("--file", metavar="LOCAL[:REMOTE]",
                     help="send a host file, written in the worker's workspace as REMOTE"
                          " (default: its name); repeatable; needs a worker with `files`"),
    ] = None,
    collect: Annotated[
        list[str] | None,
        typer.Option("--collect", metavar="GLOB",
                     help="return the workspace files matching GLOB (*, ?, **); repeatable;"
                          " needs --out"),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="DIR",
                     help="write the returned files a --collect pattern asked for under DIR"
                          " (never outside it, never through a symlink, never over a file"
                          " already there unless --overwrite)"),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="let --out replace files already in DIR")
    ] = False,
    stream: Annotated[
        bool, typer.Option("--stream", help="print the worker's events live on stderr")
    ] = False,
    events: Annotated[
        bool,
        typer.Option("--events/--no-events",
                     help="ask a worker that declares `events` for its live output even"
                          " without --stream, so that a call killed at its deadline or"
                          " memory limit carries the end of it (error.output_tail); costs"
                          " one describe first"),
    ] = True,
) -> None:  # fmt: skip
    """Run one ToolCallRequest (stdin, --request FILE, or made from --bash, --python or
    --script) and print its result envelope. A request without deadline_ms gets one
    --timeout (default 30 s) from now.

    Exit status: 0 for an ok result (a program that exited non-zero is an ok result
    with its exit_code: a note on stderr says so), 1 for an error result (or a file
    --out refused), 2 for bad input.
    """
    sink = _isolate_audit(audit)
    tool = shortcut_tool(bash, python, script)
    data: bytes | None = None
    if tool is not None:
        if request is not None:
            fail("--request and --bash/--python/--script: give one")
        if runner is None and image is None:
            image = SHORTCUT_IMAGES[tool]
        data = shortcut_request(tool, bash if bash is not None else python, script, stdin_text)
    elif stdin_text is not None:
        fail("--stdin goes with --bash, --python or --script (a request carries its own)")
    if runner is None:
        if tool is None:
            fail("--runner is required: local or docker (or give --bash, --python or --script)")
        runner = "docker"
    chosen = build_runner(runner, image, argv, memory=memory, cpus=cpus, pids=pids,
                          network=network, tmpfs=tmpfs_size, user=user, env=env,
                          env_allow=env_allow, runtime=runtime, egress_allow=egress_allow,
                          egress_network=egress_network)  # fmt: skip
    call = with_files(read_request(request, timeout, max_result_bytes, data), files or [],
                      collect or [], out)  # fmt: skip
    on_event = print_event if stream else _quiet if events else None

    async def run_one() -> CallOutcome:
        async with chosen:
            if sink is None:
                return await chosen.call(call, on_event)
            closed = audit is not None and audit.fail_closed
            return await AuditedRunner(chosen, sink, fail_closed=closed).call(call, on_event)

    try:
        outcome = anyio.run(run_one)
    except AuditFailed as exc:
        fail(str(exc), 1)
    document = outcome.to_dict() if full else outcome.result.to_wire()
    if outcome.control_characters:  # intact in the JSON, but escaped, never interpreted
        typer.echo("warning: the worker's output holds control or bidi characters", err=True)
    typer.echo(controls.dumps(document))
    if (note := exit_code_note(outcome)) is not None:
        typer.echo(note, err=True)
    all_written = (
        write_returned(outcome, out, collect or [], overwrite) if out is not None else True
    )
    raise typer.Exit(0 if outcome.ok and all_written else 1)


@app.command()
def describe(
    runner: RunnerKind,
    argv: Argv = None,
    image: Image = None,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds")] = 30.0,
    env: Env = None,
    env_allow: EnvAllow = None,
    runtime: ContainerRuntime = None,
    version: Annotated[
        str | None,
        typer.Option(
            "--version",
            help="the DescribeRequest's version (default: 1.1, which"
            " asks for capabilities, then 1.0 for a worker that refuses 1.1)",
        ),
    ] = None,
) -> None:
    """Send a DescribeRequest to a worker and print its DescribeResult (at 1.1: with the
    capabilities it declares, such as files and events)."""
    if version is not None and version not in SUPPORTED_VERSIONS:
        fail(f"--version: expected one of {', '.join(SUPPORTED_VERSIONS)}, got {version!r}")
    chosen = build_runner(runner, image, argv, env=env, env_allow=env_allow, runtime=runtime)

    async def describe_one() -> DescribeOutcome:
        async with chosen:
            if version is not None:
                return await chosen.describe(timeout, version)
            outcome = await chosen.describe(timeout, LATEST_VERSION)
            if outcome.describe is None and outcome.error_code != "WORKER_START_FAILED":
                return await chosen.describe(timeout, VERSION)  # a 1.0 worker refuses 1.1
            return outcome

    outcome = anyio.run(describe_one)
    if outcome.describe is None:
        tail = outcome.exchange.stderr_tail.decode("utf-8", "replace").strip().splitlines()
        hint = f" (worker stderr: {tail[-1][:200]})" if tail else ""
        fail(f"describe failed: {outcome.error_code}: {outcome.message}{hint}", code=1)
    typer.echo(controls.dumps(outcome.describe.to_wire()))


@app.command()
def sweep(
    everything: Annotated[
        bool, typer.Option("--all", help="remove every labelled container, whoever owns it")
    ] = False,
) -> None:
    """Remove containers of this project whose owning runner process is gone."""
    try:
        report = sweep_containers(everything=everything)
    except EngineUnavailable as exc:
        fail(str(exc), code=1)
    typer.echo(f"removed {len(report.removed)} container(s), kept {len(report.kept)}")
    for name in report.removed:
        typer.echo(f"  removed {name}")
    for name in report.networks:
        typer.echo(f"  removed network {name}")
