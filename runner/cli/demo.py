"""`agents-runner demo`: the canonical flow in three steps, each its own process.

1. `run` the demo agent (scripted LLM): `fetch_local` runs in-process, `bash` runs
   isolated in agents-runner/bash-runner, `fetch_remote_a`/`_b` are deferred; the process
   exits with the session waiting.
2. `session complete TOKEN FILE` gives each deferred call its result, from outside.
3. `session resume ID` continues to the final answer, which lists every result.
Nothing is passed between the steps but the store file and the printed tokens. Without a
Docker engine (or the image) the bash call runs through the local-process runner instead,
and the demo says so. `--pool-size N` (or AGENTS_RUNNER_POOL_SIZE) is given to the steps
that run calls, whose Docker call then starts from a warm container. What the steps log
on stderr (AGENTS_RUNNER_LOG_LEVEL) is passed on to the demo's own stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import typer
from rich.panel import Panel

from envelopes import controls
from runner.cli.app import app, fail
from runner.cli.common import JsonOption, PoolSizeOption, stdout_console
from runner.cli.display import plain, print_block, print_table
from runner.state.dispositions import unwrap_stored

REPO = Path(__file__).resolve().parents[2]
DEMO_AGENT = REPO / "examples" / "agents" / "demo.json"
BASH_IMAGE = "agents-runner/bash-runner:latest"
PROMPT = "Gather the local inventory, both remote reports and a look at the sandbox."
#: What the outside world answers for the deferred calls in step 2.
REMOTE_ANSWERS: Mapping[str, Mapping[str, str | int]] = MappingProxyType(
    {
        "fetch_remote_a": MappingProxyType({"source": "system A", "orders_today": 17}),
        "fetch_remote_b": MappingProxyType({"source": "system B", "open_tickets": 3}),
    }
)


def docker_problem() -> str | None:
    """Why the bash call cannot run in Docker here, or None when it can."""
    import docker

    try:
        api = docker.APIClient(version="auto", timeout=10, **docker.utils.kwargs_from_env())
        api.ping()
        api.inspect_image(BASH_IMAGE)
    except docker.errors.ImageNotFound:
        return f"the image {BASH_IMAGE} is missing (scripts/build-images builds it)"
    except docker.errors.DockerException as exc:
        return f"no Docker engine answers ({str(exc)[:160]})"
    return None


def local_agent(directory: Path) -> Path:
    """The demo agent with its bash rule pointed at a local bash-runner worker process."""
    from runner.session import load_agent

    document = load_agent(DEMO_AGENT).to_document()
    worker = REPO / "images" / "bash-runner" / "worker.py"
    for rule in document["toolCallPolicyConfig"]["rules"]:
        if rule["match"]["tool"] == "bash":
            rule["disposition"]["spec"] = {"tag": "localProcess",
                                           "argv": [sys.executable, str(worker)]}  # fmt: skip
    path = directory / "demo-local.json"
    path.write_text(json.dumps(document, indent=2))
    return path


def agents_runner(*args: str) -> dict[str, Any]:
    """Run one CLI command in a fresh process and return its JSON output."""
    command = [sys.executable, "-m", "runner.cli", *args, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        fail(f"`agents-runner {' '.join(args)}` failed: {done.stderr.strip()}", 1)
    if done.stderr:  # the step's log lines (warnings; more at a lower log level)
        sys.stderr.write(done.stderr)
    document: dict[str, Any] = json.loads(done.stdout)
    return document


@app.command("demo")
def demo(
    store: Annotated[
        str, typer.Option("--store", help="the store: an SQLite file, or postgresql://...")
    ] = ".agents-runner/demo.db",
    runner: Annotated[
        str, typer.Option("--runner", help="auto, docker or local (for the bash call)")
    ] = "auto",
    pool_size: PoolSizeOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a session that yields, is completed from outside and resumes, step by step."""
    if runner not in ("auto", "docker", "local"):
        fail(f"--runner: expected auto, docker or local, got {runner!r}")
    if not DEMO_AGENT.is_file():
        fail(f"the demo agent {DEMO_AGENT} is missing (run the demo from a source checkout)")
    problem = docker_problem() if runner != "local" else "--runner local was given"
    if problem and runner == "docker":
        fail(f"--runner docker: {problem}", 1)
    if "://" not in store:  # an SQLite file: its folder may not exist yet
        Path(store.removeprefix("sqlite:")).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="agents-runner-demo-") as scratch:
        trace = three_steps(store, problem, Path(scratch), as_json, pool_size)
    if as_json:
        typer.echo(controls.dumps(trace))


def three_steps(store: str, problem: str | None, scratch: Path, as_json: bool,
                pool_size: int | None = None) -> dict[str, Any]:  # fmt: skip
    console = stdout_console()
    say = (lambda *a, **k: None) if as_json else console.print

    def panel(heading: Panel) -> None:
        """A panel wraps its lines (never crops them), whatever the console's soft wrap."""
        if not as_json:
            console.print(heading, soft_wrap=False)

    table = (lambda *a: None) if as_json else show_calls
    agent_file = DEMO_AGENT
    note = None
    if problem:
        note = (f"NOTE: {problem}; the bash call runs with the LOCAL process runner, which is"
                " not a sandbox (it runs as you, on this host).")  # fmt: skip
        agent_file = local_agent(scratch)
        say(plain(note, style="bold yellow"))
    trace: dict[str, Any] = {"store": redacted(store), "runner": "local" if problem else "docker",
                             "pool_size": pool_size, "note": note, "steps": []}  # fmt: skip
    common = ("--store", store)
    # The steps that run calls; None leaves them to read the variable themselves.
    pooled = () if pool_size is None else ("--pool-size", str(pool_size))

    panel(Panel(f"[bold]Step 1[/]: run the agent (a new process)\nuser: {PROMPT}"))
    first = agents_runner("run", "--agent-file", str(agent_file), "--prompt", PROMPT, *common,
                          *pooled)  # fmt: skip
    trace["steps"].append({"step": 1, "command": "run", "output": first})
    session_id = first["session_id"]
    if first["status"] != "paused":
        fail(f"step 1 should leave the session waiting, it is {first['status']}", 1)
    shown = agents_runner("session", "show", session_id, *common)
    table(shown, "after step 1")
    say(plain(f"the process exited; session {session_id} waits on "
              f"{len(first['deferred_calls'])} deferred call(s)"))  # fmt: skip

    panel(Panel("[bold]Step 2[/]: complete the deferred calls from outside (one process each)"))
    for call in first["deferred_calls"]:
        answer = scratch / f"{call['tool_call_id']}.json"
        answer.write_text(json.dumps(dict(REMOTE_ANSWERS.get(call["tool"], {"answer": "done"}))))
        woken = agents_runner("session", "complete", call["continuation_token"], str(answer),
                              *common)  # fmt: skip
        trace["steps"].append({"step": 2, "command": "session complete", "output": woken})
        say(plain(f"session complete {call['continuation_token']} ({call['tool']}):"
                  f" {woken['open_calls']} call(s) still open"))  # fmt: skip

    panel(Panel("[bold]Step 3[/]: resume the session to its final answer (a new process)"))
    final = agents_runner("session", "resume", session_id, *common, *pooled)
    trace["steps"].append({"step": 3, "command": "session resume", "output": final})
    if final["status"] != "completed":
        fail(f"step 3 should complete the session, it is {final['status']}", 1)
    trace["final_answer"] = final["final_answer"]
    shown = agents_runner("session", "show", session_id, *common)
    table(shown, "after step 3")
    if not as_json:
        print_block("final answer", final["final_answer"])
    return trace


def redacted(store: str) -> str:
    """The store as the trace shows it: a URL's password is never printed."""
    parts = urlsplit(store)
    if parts.password is None:
        return store
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def show_calls(session: dict[str, Any], title: str) -> None:
    """The session's calls, each result whole (a cut result once read `"stdout_bytes": 2`
    for 27)."""
    rows = []
    for call in session["calls"].values():
        how = unwrap_stored(call["disposition"])[1]
        kind = how["tag"] + (f" ({how['spec']['tag']})" if "spec" in how else "")
        result = call["result"]["content"] if call["result"] else call.get("defer_reason") or ""
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        rows.append((call["tool"], call["state"], kind, text))
    print_table(("tool", "state", "how", "result"), rows, title=title, ids=(0,))
