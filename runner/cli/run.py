"""`agents-runner [--agent-file A] run --prompt ...`: one session, to its answer or pause.

`--agent-file` may come before the command (as a global option, registered here as the
app's callback) or after it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envelopes import controls
from runner.cli.app import app, configure_logging, fail
from runner.cli.common import (
    DEFAULT_STORE,
    AgentFileOption,
    ApiKeysOption,
    AttachOption,
    AuditOption,
    JsonOption,
    PoolSizeOption,
    StoreOption,
    agent_from_file,
    open_sessions,
    read_attached,
    read_prompt,
    run_engine,
)
from runner.cli.display import echo
from runner.cli.settings import read_settings, settings_class


@app.callback()
def global_options(
    ctx: typer.Context, agent_file: AgentFileOption = None, api_keys: ApiKeysOption = None
) -> None:
    """Run an agent's tool calls durably, and the dangerous ones in isolated workers."""
    settings = read_settings(settings_class(ctx.invoked_subcommand))
    configure_logging(settings.log_level)
    ctx.obj = {"agent_file": agent_file, "api_keys": api_keys, "settings": settings}


@app.command("run")
def run(
    ctx: typer.Context,
    prompt: Annotated[str | None, typer.Option("--prompt", help="the user's message")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="read the message from FILE")] = None,
    attach: AttachOption = None,
    agent_file: AgentFileOption = None,
    store: StoreOption = DEFAULT_STORE,
    pool_size: PoolSizeOption = None,
    audit: AuditOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run to the final answer, or stop when the turn waits on deferred calls and print
    the paused report (session id and continuation tokens) as JSON."""
    text = read_prompt(prompt, file)
    attachments = read_attached(attach)
    with open_sessions(store, create=True) as opened:
        agent = agent_from_file(agent_file or (ctx.obj or {}).get("agent_file"), ctx.obj)
        report = run_engine(opened, pool_size, lambda e: e.agent(agent).run(text, attachments),
                            audit)  # fmt: skip
    document = report.to_dict()
    if report.status == "waiting":
        document["status"] = "paused"
        typer.echo(controls.dumps(document))
    elif as_json:
        typer.echo(controls.dumps(document))
    elif report.status != "failed":
        echo(report.session.final_answer or "")
    if report.status == "failed":  # a script sees it in the exit code too
        fail(f"session {report.session.id} failed: {report.session.failure_reason}; fix the"
             f" cause, then `session resume {report.session.id} --retry`", 1)  # fmt: skip
