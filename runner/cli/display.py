"""How the session commands print: step reports, open calls (as agents-exe lists them),
dispositions and turns."""

from __future__ import annotations

import typer

from runner.cli.common import console, emit
from runner.session import (
    Session,
    StepReport,
)
from runner.session.policy import describe_json
from runner.state import LlmTurn, PartialUserTurn, TrackedCall, UserTurn
from runner.state.transitions import overdue


def print_report(report: StepReport, as_json: bool) -> None:
    def human() -> None:
        session = report.session
        console.print(f"session [bold]{session.id}[/] is [bold]{session.status}[/]")
        if report.ran:
            console.print(f"ran: {', '.join(report.ran)}")
        if session.status == "completed":
            console.print(session.final_answer or "", markup=False)
        if session.status == "waiting":
            print_pending(session)

    emit(report.to_dict(), as_json, human)


def print_pending(session: Session, now: int | None = None) -> None:
    """The open calls, as agents-exe lists them (whole tokens, to copy); with `now`, a
    deferred call past its expiry shows as expired (the next process to hold the
    session records it)."""
    late = {c.id for c in overdue(session, now)} if now is not None else set()
    for call in session.open_calls():
        state = "expired (overdue: no result can apply now)" if call.id in late else call.state
        typer.echo(f"  call {call.id}: {call.tool}")
        typer.echo(f"    token: {call.token}")
        typer.echo(f"    disposition: {describe_json(call.disposition)}")
        typer.echo(f"    state: {state}")


def print_tokens(session: Session) -> None:
    """agents-exe's lines for a yielded turn: `token: TOKEN (tool)` per call waited on."""
    for call in session.waiting_on():
        typer.echo(f"token: {call.token} ({call.tool})")


def print_output(call: TrackedCall) -> None:
    """The end of what the call's worker streamed, as kept with the call: its latest
    progress, then its last lines (`stdout|`, `stderr|`, `partial|`). Printed plainly:
    the text is the worker's (its control characters were escaped by the runner)."""
    output = call.output
    if output is None:
        return
    counts = f"{output.delivered} event(s)"
    if output.dropped or output.invalid:
        counts += f", {output.dropped} dropped, {output.invalid} invalid"
    shown = len([e for e in output.events if e.type != "progress"])
    typer.echo(f"output of {call.id} (attempt {output.attempt}; {counts}; last {shown} kept):")
    if output.progress is not None:
        message = f" {output.progress.text}" if output.progress.text else ""
        typer.echo(f"  progress {output.progress.fraction or 0:.0%}{message}")
    for event in output.events:
        if event.type == "progress":
            continue
        prefix = event.stream if event.type == "log" else "partial"
        for line in event.text.splitlines() or [""]:
            typer.echo(f"  {prefix}| {line}")


def describe_turn(turn: UserTurn | LlmTurn | PartialUserTurn) -> str:
    if isinstance(turn, UserTurn):
        if turn.text is not None:
            return f"user: {turn.text}"
        return f"user: results of {', '.join(e.tool_call_id for e in turn.tool_results)}"
    if isinstance(turn, LlmTurn):
        calls = ", ".join(f"{c.name}({c.id})" for c in turn.tool_calls)
        return f"llm: {turn.text or ''}" + (f" -> calls {calls}" if calls else "")
    return f"(waiting for {', '.join(turn.call_ids)})"
