"""`agents-runner session ...`: start, step, resume, complete and inspect durable sessions.

Every command takes `--store LOCATION` (default .agents-runner/state.db; see
runner/cli/common.py for what a location may be) and `--json`. A session keeps the agent
definition it started with in the store, so later commands need only its id (or a
continuation token). Every command that advances a session runs the agent in
asynchronous mode, whatever its file says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from runner.cli.app import app, fail
from runner.cli.common import (
    DEFAULT_STORE,
    AgentFileOption,
    AttachOption,
    AuditOption,
    JsonOption,
    PoolSizeOption,
    ResumeOption,
    RuntimeOption,
    SessionId,
    StoreOption,
    agent_from_file,
    emit,
    given_agent,
    open_sessions,
    read_attached,
    read_prompt,
    run_engine,
)
from runner.cli.display import (
    clipped,
    describe_turn,
    echo,
    plain,
    print_output,
    print_pending,
    print_report,
    print_table,
    print_tokens,
    say,
)
from runner.cli.results import read_result
from runner.session import (
    CompletionReport,
    Engine,
    LeaseBusy,
    Session,
    StepReport,
    ToolResult,
    UnknownToken,
    pending_entry,
)
from runner.session.audit import AuditSetting
from runner.session.operator import CONDITIONS
from runner.state.transitions import overdue
from runner.stores import Continuation, SessionStore

#: How long `complete --resume` waits for a session's lease that someone has just let go.
RESUME_LEASE_WAIT_S = 1.0


session_app = typer.Typer(no_args_is_help=True, help="Durable sessions: start, complete, inspect.")


app.add_typer(session_app, name="session")


@session_app.command("start")
def start(
    ctx: typer.Context,
    prompt: Annotated[str | None, typer.Option("--prompt", help="the user's message")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="read the message from FILE")] = None,
    attach: AttachOption = None,
    step: Annotated[bool, typer.Option("--step", help="also run the first step")] = False,
    agent_file: AgentFileOption = None,
    store: StoreOption = DEFAULT_STORE,
    pool_size: PoolSizeOption = None,
    audit: AuditOption = None,
    as_json: JsonOption = False,
) -> None:
    """Start a session and print `session-id: ID` (with --step, also run its first step)."""
    text = read_prompt(prompt, file)
    attachments = read_attached(attach)
    with open_sessions(store, create=True) as opened:
        agent = agent_from_file(agent_file or (ctx.obj or {}).get("agent_file"), ctx.obj)

        async def begin(engine: Engine) -> tuple[Session, StepReport | None]:
            session = await engine.start(agent, text, attachments)
            if not step:
                return session, None
            if not as_json:
                echo(f"session-id: {session.id}")
            return session, await engine.step(session.id)

        session, report = run_engine(opened, pool_size if step else 0, begin, audit)
        if report is not None:
            print_report(report, as_json)
            if report.status == "failed":  # printed above; a script sees it in the exit code
                fail(f"session {session.id} failed: {report.session.failure_reason}; fix the"
                     f" cause, then `session resume {session.id} --retry`", 1)  # fmt: skip
            return
    emit({"session_id": session.id, "status": session.status}, as_json,
         lambda: echo(f"session-id: {session.id}"))  # fmt: skip


@session_app.command("step")
def step(
    session_id: SessionId,
    store: StoreOption = DEFAULT_STORE,
    pool_size: PoolSizeOption = None,
    audit: AuditOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run one scheduling step."""
    with open_sessions(store) as opened:
        print_report(run_engine(opened, pool_size, lambda e: e.step(session_id), audit), as_json)


@session_app.command("resume")
def resume(
    ctx: typer.Context,
    session_id: SessionId,
    agent_file: AgentFileOption = None,
    migrate: Annotated[
        bool, typer.Option("--migrate", help="upgrade a session from an older schema")
    ] = False,
    allow_agent_change: Annotated[
        bool, typer.Option("--allow-agent-change", help="continue with a changed --agent-file")
    ] = False,
    unquarantine: Annotated[
        bool, typer.Option("--unquarantine", help="let a quarantined session run again")
    ] = False,
    retry: Annotated[
        bool, typer.Option("--retry", help="run a failed session again (a fresh budget)")
    ] = False,
    store: StoreOption = DEFAULT_STORE,
    pool_size: PoolSizeOption = None,
    audit: AuditOption = None,
    as_json: JsonOption = False,
) -> None:
    """Step until the final answer or the next wait (continues a frozen session; with
    --retry, a failed one)."""
    with open_sessions(store) as opened:
        chosen = given_agent(agent_file or (ctx.obj or {}).get("agent_file"), ctx.obj)

        async def go(engine: Engine) -> StepReport:
            return await engine.resume(session_id, unquarantine=unquarantine, retry=retry,
                                       migrate=migrate, agent=chosen,
                                       allow_agent_change=allow_agent_change)  # fmt: skip

        report = run_engine(opened, pool_size, go, audit)
        print_report(report, as_json)
    if report.status == "failed":  # printed above; a script sees it in the exit code too
        fail(f"session {session_id} failed: {report.session.failure_reason}; fix the cause,"
             f" then `session resume {session_id} --retry`", 1)  # fmt: skip


@session_app.command("pause")
def pause(
    session_id: SessionId,
    store: StoreOption = DEFAULT_STORE,
    pool_size: PoolSizeOption = None,
    audit: AuditOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run one asynchronous step and persist it, like `step`; when the turn yields, print
    the continuation tokens of the calls it waits on (agents-exe's pause; `session
    freeze` is what stops a session)."""
    with open_sessions(store) as opened:
        report = run_engine(opened, pool_size, lambda e: e.pause(session_id), audit)
    session = report.session
    document = {**report.to_dict(),
                "continuation_tokens": [c.token for c in session.waiting_on()]}  # fmt: skip

    def human() -> None:
        if session.status == "completed":
            echo("Session completed.")
            echo(session.final_answer or "")
            return
        echo(f"session {session.id} is {session.status}"
             + (" (the turn yielded)" if session.status == "waiting" else ""))  # fmt: skip
        if report.ran:
            echo(f"ran: {', '.join(report.ran)}")
        print_tokens(session)

    emit(document, as_json, human)


@session_app.command("freeze")
def freeze(
    session_id: SessionId, store: StoreOption = DEFAULT_STORE, as_json: JsonOption = False
) -> None:
    """Stop a session from being stepped, by anyone, until `session resume`."""
    with open_sessions(store) as opened:
        session = run_engine(opened, 0, lambda e: e.freeze(session_id))
    emit({"session_id": session.id, "status": session.status}, as_json,
         lambda: echo(f"session {session.id} is {session.status}"))  # fmt: skip


@session_app.command("cancel")
def cancel(
    session_id: SessionId, store: StoreOption = DEFAULT_STORE, as_json: JsonOption = False
) -> None:
    """Cancel a session and every call still open."""
    with open_sessions(store) as opened:
        session = run_engine(opened, 0, lambda e: e.cancel(session_id))
    emit({"session_id": session.id, "status": session.status}, as_json,
         lambda: echo(f"session {session.id} is cancelled"))  # fmt: skip


@session_app.command("pending")
def pending(
    session_id: SessionId, store: StoreOption = DEFAULT_STORE, as_json: JsonOption = False
) -> None:
    """Show each open call's tool, call id, continuation token and disposition (a
    deferred call past its expiry as expired)."""
    with open_sessions(store) as opened:
        found = run_engine(opened, 0, lambda e: e.pending(session_id))
    session, late, now = found.session, found.overdue, found.now_ms
    entries = [pending_entry(c, overdue=c.id in late) for c in session.open_calls()]
    document = {"session_id": session.id, "status": session.status, "calls": entries}

    def human() -> None:
        if not entries:
            echo(f"No pending calls in session {session.id} ({session.status}).")
        else:
            print_pending(session, now)

    emit(document, as_json, human)


@session_app.command("run-isolated")
def run_isolated(
    ctx: typer.Context,
    session_id: SessionId,
    agent_file: AgentFileOption = None,
    store: StoreOption = DEFAULT_STORE,
    pool_size: PoolSizeOption = None,
    runtime: RuntimeOption = None,
    audit: AuditOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run the detached isolated calls a session waits on, and record their results
    (the env values of their specs, never stored, come from --agent-file)."""
    with open_sessions(store) as opened:
        chosen = given_agent(agent_file or (ctx.obj or {}).get("agent_file"), ctx.obj)
        report = run_engine(opened, pool_size, lambda e: e.run_isolated(session_id, chosen),
                            audit, runtime)  # fmt: skip
        print_report(report, as_json)


def complete_by_token(
    store: SessionStore,
    token: str,
    result: ToolResult,
    as_json: bool,
    resume: bool = False,
    pool_size: int | None = None,
    audit: AuditSetting | None = None,
) -> None:
    """Give the call with `token` its result; with `resume`, then continue its session
    here (agents-exe's autoResume) unless a live process holds it."""
    found = find_call(store, token)

    async def go(engine: Engine) -> tuple[CompletionReport, StepReport | None, str | None]:
        completed = await engine.complete_calls(found.session_id, [(token, result)])
        if resume and not completed.conflicting and completed.session.status == "running":
            return completed, *await auto_resume(engine, completed.session.id)
        return completed, None, None

    # The warm pool is opened only for a resume (which may run isolated calls).
    report, continued, holder = run_engine(store, pool_size if resume else 0, go, audit)
    if report.conflicting:
        fail(f"call {found.call_id} already ended with a different result; this one was"
             " refused and nothing changed (see `session show`)", 1)  # fmt: skip
    session = report.session
    document: dict[str, Any] = report.to_dict()
    if resume:
        document["resumed"] = continued.to_dict() if continued is not None else None
        document["continued_by"] = holder

    def human() -> None:
        if report.late:
            echo(f"call {found.call_id} had expired; the result is kept as late"
                 " and changes nothing")  # fmt: skip
        elif report.already_completed:
            echo(f"call {found.call_id} was already completed; nothing applied")
        else:
            echo(f"recorded the result of {found.call_id} in session {found.session_id}")
        echo(f"{len(session.open_calls())} call(s) still open")
        if holder is not None:
            echo(f"session {session.id} is held by {holder}, which continues it")
        elif continued is not None:
            print_report(continued, False)
        elif resume:
            echo(f"session {session.id} is {session.status}: not resumed"
                 + (" until its open calls have results"
                    if session.status == "waiting" else ""))  # fmt: skip

    emit(document, as_json, human)


def find_call(store: SessionStore, token: str) -> Continuation:
    """The session and call `token` leads to (the Engine finds it); the command fails,
    naming the store, when no call has it."""

    async def find(engine: Engine) -> Continuation | None:
        try:
            return await engine.find(token)
        except UnknownToken:
            return None

    found = run_engine(store, 0, find)
    if found is None:
        fail(f"no call has the continuation token {token!r} in the {store.description}")
    return found


async def auto_resume(engine: Engine, session_id: str) -> tuple[StepReport | None, str | None]:
    """Resume the session here: (its report, None); or (None, who) when a live process
    holds its lease, which then continues it."""
    holder = await engine.holder(session_id)
    if holder is not None:
        return None, holder
    try:
        return await engine.resume(session_id, lease_wait_s=RESUME_LEASE_WAIT_S), None
    except LeaseBusy:  # taken between the look and the try: the taker continues it
        return None, await engine.holder(session_id) or "another process"


@session_app.command("complete")
def complete(
    token: Annotated[str, typer.Argument(help="the call's continuation token")],
    file: Annotated[Path, typer.Argument(help="the result: JSON, or text; - for stdin")],
    resume: ResumeOption = False,
    store: StoreOption = DEFAULT_STORE,
    pool_size: PoolSizeOption = None,
    audit: AuditOption = None,
    as_json: JsonOption = False,
) -> None:
    """Give a deferred call its result (idempotent: a second result is reported, not
    applied). FILE holds a UserToolResponse ({"type": "text"|"json"|"media"|"mixed",
    ...}), a ToolCallResult envelope, any other JSON (a JSON result), or plain text."""
    result = read_result(file)
    with open_sessions(store) as opened:
        complete_by_token(opened, token, result, as_json, resume, pool_size, audit)


@session_app.command("fail")
def fail_call(
    token: Annotated[str, typer.Argument(help="the call's continuation token")],
    reason: Annotated[str, typer.Option("--reason", help="what the model is told")],
    resume: ResumeOption = False,
    store: StoreOption = DEFAULT_STORE,
    pool_size: PoolSizeOption = None,
    audit: AuditOption = None,
    as_json: JsonOption = False,
) -> None:
    """Fail a deferred call; the model sees the reason."""
    if not reason.strip():
        fail("--reason must say why the call failed")
    failed = ToolResult.error("TOOL_FAILED", reason)
    with open_sessions(store) as opened:
        complete_by_token(opened, token, failed, as_json, resume, pool_size, audit)


@session_app.command("retry")
def retry(
    token: Annotated[str, typer.Argument(help="the call's continuation token")],
    force: Annotated[bool, typer.Option("--force", help="run it again despite the risk")] = False,
    store: StoreOption = DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """Run a call in unknown_outcome again (needs --force: it may have had its effects)."""
    with open_sessions(store) as opened:
        found = find_call(opened, token)
        session = run_engine(opened, 0, lambda e: e.retry(found.session_id, token, force=force))
    emit({"session_id": session.id, "status": session.status, "retried": found.call_id},
         as_json, lambda: echo(f"call {found.call_id} will run again"))  # fmt: skip


@session_app.command("list")
def list_sessions(
    status: Annotated[str | None, typer.Option("--status", help="only this condition")] = None,
    store: StoreOption = DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """List the sessions in the store with their conditions (see `session show`)."""
    if status is not None and status not in CONDITIONS:
        fail(f"--status: expected one of {', '.join(CONDITIONS)}, got {status!r}")
    with open_sessions(store) as opened:
        listed = run_engine(opened, 0, lambda e: e.list(status))
    rows = [{**row.summary.__dict__, "conditions": row.conditions,
             **({"reason": row.failure_reason} if row.failure_reason else {})}
            for row in listed]  # fmt: skip

    def human() -> None:
        print_table(("session", "status", "conditions", "agent", "version"),
                    [(row["id"], row["status"], ", ".join(row["conditions"][1:]),
                      row["agent_slug"], row["version"]) for row in rows], ids=(0,))  # fmt: skip

    emit({"sessions": rows}, as_json, human)


@session_app.command("show")
def show(
    session_id: SessionId, store: StoreOption = DEFAULT_STORE, as_json: JsonOption = False
) -> None:
    """Show a session: its turns, its calls and their results."""
    with open_sessions(store) as opened:
        shown = run_engine(opened, 0, lambda e: e.show(session_id))
    session, late, why = shown.session, shown.late, shown.why()
    # Expiry is decided by time: a deferred call past it shows as expired even before
    # a process holding the lease records it (`overdue` marks those).
    late_calls = {c.id for c in overdue(session, shown.now_ms)}

    def human() -> None:
        say("session ", plain(session.id, style="bold"), f" ({session.agent_slug}) is ",
            plain(session.status, style="bold"), f", version {session.version}")  # fmt: skip
        say(why)
        for call_id, result in late:
            say(f"late result for {call_id} (kept, not applied): {clipped(result.text())}")
        for index, turn in enumerate(session.turns):
            say(plain(index, style="dim"), " ", describe_turn(turn))
        rows = []
        for call in session.calls.values():
            text = call.result.text() if call.result else ""
            state = "expired (overdue)" if call.id in late_calls else call.state
            rows.append((call.id, call.tool, state, call.attempts, clipped(text)))
        print_table(("call", "tool", "state", "attempts", "result"), rows, ids=(0, 1))
        for call in session.calls.values():
            print_output(call)

    emit(shown.document(), as_json, human)
