"""`agents-runner session ...`: start, step, resume, wake and inspect durable sessions.

Every command takes `--store PATH` (default .agents-runner/state.db) and `--json`. A
session keeps the agent definition it started with in the store, so later commands need
only its id (or a continuation token). Every command that advances a session runs the
agent in asynchronous mode, whatever its file says.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from envelopes import codec
from envelopes.v1 import ToolCallResult
from runner.cli.app import app, fail
from runner.llm import LLMError
from runner.session import (
    AgentError,
    DurableAgent,
    LeaseBusy,
    Session,
    SessionError,
    StepReport,
    StoreCapabilityError,
    ToolResult,
    from_envelope,
    load_agent,
    parse_agent,
    pending_entry,
    require_durable,
    with_durable_workflows,
)
from runner.session.operator import CONDITIONS, conditions, explain
from runner.state import LlmTurn, PartialUserTurn, UserTurn
from runner.stores import DurableStore, StoreError
from runner.stores import open_store as open_location

DEFAULT_STORE = ".agents-runner/state.db"
#: Largest result file `session complete` reads.
MAX_RESULT_FILE_BYTES = 16 * 1024 * 1024

StoreOption = Annotated[
    str,
    typer.Option("--store", envvar="AGENTS_RUNNER_STORE",
                 help="the store: PATH or sqlite:PATH (SQLite), file:DIR, or LOC,LOC (a"
                      " composite whose first store takes the writes)"),
]  # fmt: skip
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON for machines")]
AgentFileOption = Annotated[
    Path | None, typer.Option("--agent-file", help="the agent definition (JSON)")
]
SessionId = Annotated[str, typer.Argument(help="the session id")]

session_app = typer.Typer(no_args_is_help=True, help="Durable sessions: start, wake, inspect.")
app.add_typer(session_app, name="session")
console = Console(highlight=False)

T = TypeVar("T")


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn every expected failure into one line on stderr (2: bad input, 1: the rest)."""
    try:
        yield
    except (AgentError, SessionError, StoreCapabilityError) as exc:
        fail(str(exc), 2)
    except (StoreError, LLMError, LeaseBusy) as exc:
        fail(str(exc), 1)


@contextmanager
def open_store(location: str) -> Iterator[DurableStore]:
    """The store at `location`, closed when the command is done with it. The commands
    advance sessions from separate processes, so the store must fence (a file store
    alone is refused with the reason)."""
    with user_errors():
        store = open_location(location)
    try:
        with user_errors():
            durable = require_durable(store, "the session commands (separate processes)")
        yield durable
    finally:
        store.close()


def stored_agent(
    store: DurableStore, session_id: str, agent_file: Path | None = None, **options: Any
) -> DurableAgent:
    """The agent a session started with, from the store (or `agent_file`, checked against
    it when the session advances), in asynchronous mode. `options`: DurableAgent fields
    such as migrate=True or allow_agent_change=True."""
    with user_errors():
        session = store.load(session_id, history=False)
        if agent_file is not None:
            agent = load_agent(agent_file)
        else:
            agent = parse_agent(store.agent_document(session.agent_hash), "stored agent")
    durable = with_durable_workflows(agent.with_mode("asynchronous"), store)
    return replace(durable, **options)


def agent_from_file(path: Path | None, store: DurableStore) -> DurableAgent:
    if path is None:
        fail("--agent-file is required (before or after the command name)")
    with user_errors():
        return with_durable_workflows(load_agent(path), store)


def run_async(function: Callable[..., Awaitable[T]], *args: Any) -> T:
    with user_errors():
        return anyio.run(function, *args)


def emit(document: dict[str, Any], as_json: bool, human: Callable[[], None]) -> None:
    if as_json:
        typer.echo(json.dumps(document, ensure_ascii=False))
    else:
        human()


def print_report(report: StepReport, as_json: bool) -> None:
    def human() -> None:
        session = report.session
        console.print(f"session [bold]{session.id}[/] is [bold]{session.status}[/]")
        if report.ran:
            console.print(f"ran: {', '.join(report.ran)}")
        if session.status == "completed":
            console.print(session.final_answer or "")
        if session.status == "waiting":
            print_pending(session)

    emit(report.to_dict(), as_json, human)


def print_pending(session: Session) -> None:
    table = Table("tool", "tool_call_id", "state", "continuation token", "why")
    for call in session.open_calls():
        table.add_row(call.tool, call.id, call.state, call.token, call.defer_reason or "")
    console.print(table)


# --- commands ------------------------------------------------------------------------


@session_app.command("start")
def start(
    ctx: typer.Context,
    prompt: Annotated[str | None, typer.Option("--prompt", help="the user's message")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="read the message from FILE")] = None,
    step: Annotated[bool, typer.Option("--step", help="also run the first step")] = False,
    agent_file: AgentFileOption = None,
    store: StoreOption = DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """Start a session (and with --step, run its first step)."""
    text = read_prompt(prompt, file)
    with open_store(store) as opened:
        agent = agent_from_file(agent_file or (ctx.obj or {}).get("agent_file"), opened)
        with user_errors():
            session = agent.start(text)
        if step:
            stepper = stored_agent(opened, session.id)
            print_report(run_async(stepper.step, session.id), as_json)
            return
    emit({"session_id": session.id, "status": session.status}, as_json,
         lambda: console.print(f"started session [bold]{session.id}[/]"))  # fmt: skip


def read_prompt(prompt: str | None, file: Path | None) -> str:
    if (prompt is None) == (file is None):
        fail("give the user's message with exactly one of --prompt TEXT or --file FILE")
    if file is not None:
        try:
            prompt = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"--file: cannot read {file}: {exc}")
    assert prompt is not None
    if not prompt.strip():
        fail("the user's message is empty")
    return prompt


@session_app.command("step")
def step(
    session_id: SessionId, store: StoreOption = DEFAULT_STORE, as_json: JsonOption = False
) -> None:
    """Run one scheduling step."""
    with open_store(store) as opened:
        agent = stored_agent(opened, session_id)
        print_report(run_async(agent.step, session_id), as_json)


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
    store: StoreOption = DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """Step until the final answer or the next wait (un-pauses a paused session)."""
    chosen = agent_file or (ctx.obj or {}).get("agent_file")
    with open_store(store) as opened:
        agent = stored_agent(opened, session_id, chosen, migrate=migrate,
                             allow_agent_change=allow_agent_change)  # fmt: skip

        async def go() -> StepReport:
            return await agent.resume(session_id, unquarantine=unquarantine)

        print_report(run_async(go), as_json)


@session_app.command("pause")
def pause(
    session_id: SessionId, store: StoreOption = DEFAULT_STORE, as_json: JsonOption = False
) -> None:
    """Stop a session from being stepped until `session resume`."""
    with open_store(store) as opened:
        agent = stored_agent(opened, session_id)
        with user_errors():
            session = agent.pause(session_id)
    emit({"session_id": session.id, "status": session.status}, as_json,
         lambda: console.print(f"session {session.id} is paused"))  # fmt: skip


@session_app.command("cancel")
def cancel(
    session_id: SessionId, store: StoreOption = DEFAULT_STORE, as_json: JsonOption = False
) -> None:
    """Cancel a session and every call still open."""
    with open_store(store) as opened:
        agent = stored_agent(opened, session_id)
        with user_errors():
            session = agent.cancel(session_id)
    emit({"session_id": session.id, "status": session.status}, as_json,
         lambda: console.print(f"session {session.id} is cancelled"))  # fmt: skip


@session_app.command("pending")
def pending(
    session_id: SessionId, store: StoreOption = DEFAULT_STORE, as_json: JsonOption = False
) -> None:
    """List the calls still open, with their continuation tokens."""
    with open_store(store) as opened, user_errors():
        session = opened.load(session_id, history=False)  # open calls are all loaded
    document = {"session_id": session.id, "status": session.status,
                "pending": [pending_entry(c) for c in session.open_calls()]}  # fmt: skip
    emit(document, as_json, lambda: print_pending(session))


@session_app.command("run-isolated")
def run_isolated(
    session_id: SessionId, store: StoreOption = DEFAULT_STORE, as_json: JsonOption = False
) -> None:
    """Run the detached isolated calls a session waits on, and record their results."""
    with open_store(store) as opened:
        agent = stored_agent(opened, session_id)
        print_report(run_async(agent.run_isolated, session_id), as_json)


def read_result(path: Path) -> ToolResult:
    """A result file: a ToolCallResult envelope, any other JSON (a JSON result), or text."""
    try:
        with open("/dev/stdin", "rb") if str(path) == "-" else path.open("rb") as handle:
            data = handle.read(MAX_RESULT_FILE_BYTES + 1)
    except OSError as exc:
        fail(f"cannot read the result file {path}: {exc.strerror}")
    if len(data) > MAX_RESULT_FILE_BYTES:
        fail(f"the result file {path} is larger than {MAX_RESULT_FILE_BYTES} bytes")
    if not data.strip():
        fail(f"the result file {path} is empty; a result needs some content")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"the result file {path} is not UTF-8 text: {exc}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return ToolResult.ok(text)
    if isinstance(value, dict) and value.get("kind") == "ToolCallResult":
        try:
            return from_envelope(ToolCallResult.model_validate(value))
        except ValidationError as exc:
            fail(f"{path}: not a valid ToolCallResult: {codec.describe_validation_error(exc)}")
    return ToolResult.ok(value)


def wake_by_token(store: DurableStore, token: str, result: ToolResult, as_json: bool) -> None:
    with user_errors():
        found = store.find(token)
    if found is None:
        fail(f"no call has the continuation token {token!r} in the {store.description}")
    agent = stored_agent(store, found.session_id)
    report = run_async(agent.wake, found.session_id, [(token, result)])

    if report.conflicting:
        fail(f"call {found.call_id} already ended with a different result; this one was"
             " refused and nothing changed (see `session show`)", 1)  # fmt: skip

    def human() -> None:
        if report.late:
            console.print(f"call {found.call_id} had expired; the result is kept as late"
                          " and changes nothing")  # fmt: skip
        elif report.already_completed:
            console.print(f"call {found.call_id} was already completed; nothing applied")
        else:
            console.print(f"recorded the result of {found.call_id} in session {found.session_id}")
        console.print(f"{len(report.session.open_calls())} call(s) still open")

    emit(report.to_dict(), as_json, human)


@session_app.command("complete")
def complete(
    token: Annotated[str, typer.Argument(help="the call's continuation token")],
    file: Annotated[Path, typer.Argument(help="the result: JSON, or text; - for stdin")],
    store: StoreOption = DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """Give a deferred call its result (idempotent: a second result is reported, not applied)."""
    result = read_result(file)
    with open_store(store) as opened:
        wake_by_token(opened, token, result, as_json)


@session_app.command("fail")
def fail_call(
    token: Annotated[str, typer.Argument(help="the call's continuation token")],
    reason: Annotated[str, typer.Option("--reason", help="what the model is told")],
    store: StoreOption = DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """Fail a deferred call; the model sees the reason."""
    if not reason.strip():
        fail("--reason must say why the call failed")
    with open_store(store) as opened:
        wake_by_token(opened, token, ToolResult.error("TOOL_FAILED", reason), as_json)


@session_app.command("retry")
def retry(
    token: Annotated[str, typer.Argument(help="the call's continuation token")],
    force: Annotated[bool, typer.Option("--force", help="run it again despite the risk")] = False,
    store: StoreOption = DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """Run a call in unknown_outcome again (needs --force: it may have had its effects)."""
    with open_store(store) as opened:
        with user_errors():
            found = opened.find(token)
        if found is None:
            fail(f"no call has the continuation token {token!r} in the {opened.description}")
        agent = stored_agent(opened, found.session_id)

        async def go() -> Session:
            return await agent.retry(found.session_id, token, force=force)

        session = run_async(go)
    emit({"session_id": session.id, "status": session.status, "retried": found.call_id},
         as_json, lambda: console.print(f"call {found.call_id} will run again"))  # fmt: skip


@session_app.command("list")
def list_sessions(
    status: Annotated[str | None, typer.Option("--status", help="only this condition")] = None,
    store: StoreOption = DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """List the sessions in the store with their conditions (see `session show`)."""
    if status is not None and status not in CONDITIONS:
        fail(f"--status: expected one of {', '.join(CONDITIONS)}, got {status!r}")
    rows = []
    with open_store(store) as opened, user_errors():
        now = opened.now_ms()
        for row in opened.list():
            found = conditions(opened.load(row.id), opened.lease(row.id), now)
            if status is None or status in found:
                rows.append({**row.__dict__, "conditions": found})

    def human() -> None:
        table = Table("session", "status", "conditions", "agent", "version")
        for row in rows:
            table.add_row(row["id"], row["status"], ", ".join(row["conditions"][1:]),
                          row["agent_slug"], str(row["version"]))  # fmt: skip
        console.print(table)

    emit({"sessions": rows}, as_json, human)


@session_app.command("show")
def show(
    session_id: SessionId, store: StoreOption = DEFAULT_STORE, as_json: JsonOption = False
) -> None:
    """Show a session: its turns, its calls and their results."""
    with open_store(store) as opened, user_errors():
        session = opened.load(session_id)
        lease, now = opened.lease(session_id), opened.now_ms()
        late = opened.late_results(session_id)
    why = explain(session, lease, now)

    def human() -> None:
        console.print(f"session [bold]{session.id}[/] ({session.agent_slug}) is "
                      f"[bold]{session.status}[/], version {session.version}")  # fmt: skip
        console.print(why)
        for call_id, result in late:
            console.print(f"late result for {call_id} (kept, not applied): {result.text()[:120]}")
        for index, turn in enumerate(session.turns):
            console.print(f"[dim]{index}[/] {describe_turn(turn)}")
        table = Table("call", "tool", "state", "attempts", "result")
        for call in session.calls.values():
            text = call.result.text() if call.result else ""
            table.add_row(call.id, call.tool, call.state, str(call.attempts), text[:120])
        console.print(table)

    late_results = [{"call_id": c, "result": r.model_dump()} for c, r in late]
    document = {**json.loads(session.to_json()), "why": why, "late_results": late_results,
                "conditions": conditions(session, lease, now)}  # fmt: skip
    emit(document, as_json, human)


def describe_turn(turn: UserTurn | LlmTurn | PartialUserTurn) -> str:
    if isinstance(turn, UserTurn):
        if turn.text is not None:
            return f"user: {turn.text}"
        return f"user: results of {', '.join(e.tool_call_id for e in turn.tool_results)}"
    if isinstance(turn, LlmTurn):
        calls = ", ".join(f"{c.name}({c.id})" for c in turn.tool_calls)
        return f"llm: {turn.text or ''}" + (f" -> calls {calls}" if calls else "")
    return f"(waiting for {', '.join(turn.call_ids)})"
