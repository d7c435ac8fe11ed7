"""`agents-runner audit`: list the audit records of isolated calls.

Records come from the store (`--store LOC`, default .agents-runner/state.db: its
`audit_records` table, or a file store's audit.jsonl) or from a JSON-lines file
(`--file PATH`, what `--audit file:PATH` writes). `--session`, `--tool`, `--outcome`,
`--since` and `--until` filter them; the newest `--limit` (default 100, 0 for all) are
printed oldest first, as a table or, with `--json`, as JSON lines (the records as
stored). A record holds sizes and hashes, never argument values or outputs.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from types import MappingProxyType
from typing import Annotated

import typer

from runner.cli.app import app, fail
from runner.cli.common import DEFAULT_STORE, JsonOption, open_sessions, user_errors
from runner.cli.display import echo, print_table
from runner.cli.settings import env_name
from runner.isolation.audit import (
    AuditError,
    AuditQuery,
    AuditRecord,
    iso_to_ms,
    read_audit_file,
    select,
)
from runner.stores import audit_log_of

_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = MappingProxyType({"s": 1, "m": 60, "h": 3600, "d": 86400})
TIME_FORMS = ("an ISO-8601 time (2026-12-01, 2026-12-01T10:00:00Z; UTC without a zone)"
              " or an age (90s, 15m, 2h, 7d)")  # fmt: skip


def parse_time(text: str, option: str) -> int:
    """Epoch ms of `text`: an ISO-8601 time, or an age before now."""
    value = text.strip()
    ago = _AGO.match(value)
    if ago:
        return int((time.time() - float(ago.group(1)) * _UNIT_S[ago.group(2)]) * 1000)
    try:
        return iso_to_ms(value)
    except ValueError:
        fail(f"{option}: {text!r} is not a time; expected {TIME_FORMS}")


def _print_table(records: list[AuditRecord]) -> None:
    rows = []
    for r in records:
        ran_in = " ".join(str(x) for x in (r.runner, r.image, r.runtime) if x)
        rows.append((r.at.replace("T", " ")[:19], r.session_id or "-", r.call_id or "-", r.tool,
                     r.outcome, f"{r.duration_ms:.0f}", f"{r.bytes_in}/{r.bytes_out}", ran_in,
                     r.egress_denied_count or ""))  # fmt: skip
    print_table(("started (UTC)", "session", "call", "tool", "outcome", "ms", "bytes in/out",
                 "ran in", "denied"), rows, ids=range(5))  # fmt: skip
    echo(f"{len(records)} record(s)")


@app.command("audit")
def audit(
    ctx: typer.Context,
    store: Annotated[
        str, typer.Option("--store", envvar=env_name("store"), help="the store to read")
    ] = DEFAULT_STORE,
    file: Annotated[
        Path | None, typer.Option("--file", help="read a JSON-lines audit file instead")
    ] = None,
    session: Annotated[str | None, typer.Option("--session", help="one session's calls")] = None,
    tool: Annotated[str | None, typer.Option("--tool", help="one tool's calls")] = None,
    outcome: Annotated[
        str | None, typer.Option("--outcome", help="ok, or an error code (WORKER_TIMEOUT...)")
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="calls started at or after this time or age")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="calls started before this time or age")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=0, help="the newest N records (0: all)")
    ] = 100,
    as_json: JsonOption = False,
) -> None:
    """List the audit records of isolated calls, oldest first (the newest --limit)."""
    source = ctx.get_parameter_source("store")  # AGENTS_RUNNER_STORE may be set with --file
    if file is not None and source is not None and source.name == "COMMANDLINE":
        fail("give --store or --file, not both")
    query = AuditQuery(
        session_id=session,
        tool=tool,
        outcome=outcome,
        since_ms=None if since is None else parse_time(since, "--since"),
        until_ms=None if until is None else parse_time(until, "--until"),
        limit=limit or None,
    )
    try:
        if file is not None:
            records = select(read_audit_file(file), query)
        else:
            with open_sessions(store, create=False) as opened, user_errors():
                log = audit_log_of(opened)
                if log is None:
                    fail(f"the {opened.description} keeps no audit log")
                records = log.audit_records(query)
    except AuditError as exc:
        fail(str(exc), 2)
    if as_json:
        for record in records:
            typer.echo(record.to_json())
    else:
        _print_table(records)


__all__ = ["audit", "parse_time"]
