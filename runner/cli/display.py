"""How the commands print: the one way to show text that came from a worker, a model or a
person (`shown`, `plain`, `say`, `echo`: control characters escaped by
envelopes.controls, never read as rich markup), tables that never cut what people copy
(`print_table`), and the session commands' step reports, open calls, dispositions and
turns.

Tables: on a terminal, a rich table whose identifier columns stay whole on one line and
whose other cells fold instead of being cut; on a terminal too narrow for the identifiers,
and anywhere else (a pipe, a file), plain rows of space-aligned columns, one row per line,
nothing wrapped or cut. `--json` stays the machine format.
"""

from __future__ import annotations

from collections.abc import Sequence

import typer
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from envelopes.controls import escape_controls
from runner.cli.common import emit, stdout_console
from runner.session import (
    SessionTail,
    StepReport,
)
from runner.session.policy import describe_json
from runner.state import LlmTurn, PartialUserTurn, TrackedCall, UserTurn
from runner.state.transitions import overdue


def shown(value: object, multiline: bool = False) -> str:
    """`value` as text fit for a terminal: every control, bidi and surrogate character
    escaped (LF kept when `multiline`)."""
    return escape_controls("" if value is None else str(value), multiline)


def plain(value: object, multiline: bool = True, style: str = "") -> Text:
    """`value` as a rich Text: escaped, and never read as markup (`[bold]` stays)."""
    return Text(shown(value, multiline), style=style)


def say(*pieces: object) -> None:
    """Print one line made of `pieces` on stdout: a rich Text (our own styled words) as
    it is, anything else escaped and shown literally (never read as markup)."""
    line = Text()
    for piece in pieces:
        line.append_text(piece if isinstance(piece, Text) else plain(piece))
    stdout_console().print(line, soft_wrap=True)


def echo(value: object, err: bool = False) -> None:
    """`value`, escaped (lines kept), as one plain line on stdout (or stderr)."""
    typer.echo(shown(value, multiline=True), err=err)


def print_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    title: str | None = None,
    ids: Sequence[int] = (),
) -> None:
    """`rows` under `columns`, every cell whole: a rich Text (our own styled words) as it
    is, anything else escaped and shown literally. `ids`: the columns that hold
    identifiers, which are never broken. On a terminal too narrow for those whole, and
    whenever output is not a terminal, the rows are plain space-aligned lines."""
    console = stdout_console()
    cells = [[c if isinstance(c, Text) else plain(c, multiline=False) for c in row] for row in rows]
    id_widths = {i: max([cell_len(columns[i]), *(row[i].cell_len for row in cells)]) for i in ids}
    # Borders and padding take 3 columns per column (+1); a folded column needs a few.
    needed = sum(id_widths.values()) + 4 * (len(columns) - len(ids)) + 3 * len(columns) + 1
    if not console.is_terminal or needed > console.width:
        if title:
            typer.echo(shown(title))
        lines = [list(columns), *([c.plain for c in row] for row in cells)]
        widths = [max(cell_len(line[i]) for line in lines) for i in range(len(columns))]
        for line in lines:
            padded = [c + " " * (w - cell_len(c)) for c, w in zip(line, widths, strict=True)]
            typer.echo("  ".join(padded).rstrip())
        return
    table = Table(title=None if title is None else plain(title), title_justify="left")
    for index, column in enumerate(columns):
        if index in id_widths:
            table.add_column(column, no_wrap=True, min_width=id_widths[index])
        else:
            table.add_column(column, overflow="fold")
    for row in cells:
        table.add_row(*row)
    console.print(table, soft_wrap=False)


#: Characters of a result `session show` prints in its table (`--json` has all of it).
RESULT_SHOWN = 240


def clipped(text: str, limit: int = RESULT_SHOWN) -> str:
    """`text`, or its first `limit` characters and how many more there are: a cut that
    says so (never a number silently shortened)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters; --json shows all)"


def print_block(title: str, body: str) -> None:
    """A titled block of text (the final answer): every line whole, escaped, none cut."""
    console = stdout_console()
    console.print(Text(f"── {title} ──", style="bold"), soft_wrap=True)
    console.print(plain(body), soft_wrap=True)


def print_report(report: StepReport, as_json: bool) -> None:
    def human() -> None:
        session = report.session
        say("session ", plain(session.id, style="bold"), " is ",
            plain(session.status, style="bold"))  # fmt: skip
        if report.ran:
            say(f"ran: {', '.join(report.ran)}")
        if session.status == "completed":
            say(session.final_answer or "")
        if session.status == "waiting":
            print_pending(session)

    emit(report.to_dict(), as_json, human)


def print_pending(session: SessionTail, now: int | None = None) -> None:
    """The open calls, as agents-exe lists them (whole tokens, to copy); with `now`, a
    deferred call past its expiry shows as expired (the next process to hold the
    session records it)."""
    late = {c.id for c in overdue(session, now)} if now is not None else set()
    for call in session.open_calls():
        state = "expired (overdue: no result can apply now)" if call.id in late else call.state
        echo(f"  call {shown(call.id)}: {shown(call.tool)}")
        echo(f"    token: {shown(call.token)}")
        echo(f"    disposition: {describe_json(call.disposition)}")
        echo(f"    state: {state}")


def print_tokens(session: SessionTail) -> None:
    """agents-exe's lines for a yielded turn: `token: TOKEN (tool)` per call waited on."""
    for call in session.waiting_on():
        echo(f"token: {shown(call.token)} ({shown(call.tool)})")


def print_output(call: TrackedCall) -> None:
    """The end of what the call's worker streamed, as kept with the call: its latest
    progress, then its last lines (`stdout|`, `stderr|`, `partial|`). Printed plainly:
    the text is the worker's (escaped by the runner, and again here for older rows)."""
    output = call.output
    if output is None:
        return
    counts = f"{output.delivered} event(s)"
    if output.dropped or output.invalid:
        counts += f", {output.dropped} dropped, {output.invalid} invalid"
    kept = len([e for e in output.events if e.type != "progress"])
    echo(f"output of {shown(call.id)} (attempt {output.attempt}; {counts}; last {kept} kept):")
    if output.progress is not None:
        message = f" {shown(output.progress.text)}" if output.progress.text else ""
        echo(f"  progress {output.progress.fraction or 0:.0%}{message}")
    for event in output.events:
        if event.type == "progress":
            continue
        prefix = event.stream if event.type == "log" else "partial"
        for line in event.text.splitlines() or [""]:
            echo(f"  {prefix}| {shown(line)}")


def describe_turn(turn: UserTurn | LlmTurn | PartialUserTurn) -> str:
    if isinstance(turn, UserTurn):
        if turn.text is not None:
            return f"user: {turn.text}"
        return f"user: results of {', '.join(e.tool_call_id for e in turn.tool_results)}"
    if isinstance(turn, LlmTurn):
        calls = ", ".join(f"{c.name}({c.id})" for c in turn.tool_calls)
        return f"llm: {turn.text or ''}" + (f" -> calls {calls}" if calls else "")
    return f"(waiting for {', '.join(turn.call_ids)})"
