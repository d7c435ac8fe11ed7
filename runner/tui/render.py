"""What the screens draw, from a session document (`session show --json`'s shape): the
conversation as lines, the Pending panel's rows, the header. Pure functions, no I/O, so a
test can read what the operator would see."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from rich.text import Text

from runner.session.policy import describe_json
from runner.tui.source import LiveCall

#: How much of a result or an argument list one line shows.
SHOWN_CHARS = 300
#: Call states that are over (their stored output shows in the conversation instead).
ENDED = ("completed", "failed", "expired", "cancelled")
#: Output lines the live panel shows per running call.
LIVE_SHOWN_LINES = 3
#: Call states that are still open (the Pending panel lists those a person can end).
PENDING_STATES = ("deferred", "unknown_outcome")
STATE_STYLES = MappingProxyType({
    "completed": "green", "failed": "red", "expired": "red", "cancelled": "red",
    "deferred": "yellow", "unknown_outcome": "magenta", "running": "cyan", "ready": "cyan",
})  # fmt: skip
STATUS_STYLES = MappingProxyType({
    "completed": "green", "failed": "red", "cancelled": "red", "waiting": "yellow",
    "quarantined": "magenta", "frozen": "blue", "running": "cyan",
})  # fmt: skip


def ago(when_ms: int | None, now_ms: int) -> str:
    """`12s ago`, `5m ago`, `3h ago`, `2d ago` (`-` for no time)."""
    if when_ms is None:
        return "-"
    return _span(max(0, now_ms - when_ms)) + " ago"


def until(when_ms: int | None, now_ms: int) -> str:
    """`in 5m`, or `passed` once the time is behind us (`-` for no time)."""
    if when_ms is None:
        return "-"
    return f"in {_span(when_ms - now_ms)}" if when_ms > now_ms else "passed"


def _span(ms: int) -> str:
    seconds = ms // 1000
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def result_text(result: dict[str, Any] | None) -> str:
    """A ToolResult's JSON as the model reads it (ToolResult.text)."""
    if not result:
        return ""
    content = result.get("content")
    body = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if result.get("status") == "ok":
        return body
    code = f" {result['error_code']}" if result.get("error_code") else ""
    return f"[{result.get('status')}{code}] {body}"


def _short(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def conversation(document: dict[str, Any]) -> list[Text]:
    """The conversation, one Text per entry: user turns, model turns and, under each
    model turn, its tool calls with disposition, state and result or error."""
    lines: list[Text] = []
    first = int(document.get("first_turn", 0))
    if first:
        lines.append(Text(f"… {first} earlier turn(s) not loaded: Ctrl+G loads them", "dim"))
    calls: dict[str, dict[str, Any]] = document.get("calls", {})
    for offset, turn in enumerate(document.get("turns", [])):
        kind = turn.get("kind")
        if kind == "user" and turn.get("text") is not None:
            attached = [a.get("name") for a in turn.get("attachments", [])]
            extra = f"  [attached: {', '.join(attached)}]" if attached else ""
            lines.append(Text.assemble(("you  ", "bold blue"), turn["text"] + extra))
        elif kind == "user":
            ids = [e.get("tool_call_id") for e in turn.get("tool_results", [])]
            lines.append(Text(f"     ↳ results of {', '.join(ids)} sent to the model", "dim"))
        elif kind == "llm":
            if turn.get("text"):
                lines.append(Text.assemble(("model ", "bold green"), turn["text"]))
            for asked in turn.get("tool_calls", []):
                lines.append(_call_line(asked, calls.get(asked.get("id", ""))))
        elif kind == "partial_user":
            ids = turn.get("call_ids", [])
            lines.append(Text(f"     … gathering the results of {', '.join(ids)}", "dim"))
            if first and offset == 0:  # the model turn that asked is not loaded: its calls
                for call_id in ids:
                    call = calls.get(call_id, {})
                    asked = {"id": call_id, "name": call.get("tool"),
                             "arguments": call.get("arguments", {})}  # fmt: skip
                    lines.append(_call_line(asked, call or None))
    if document.get("status") == "completed":
        lines.append(Text("── completed: the final answer is the model's last turn", "green"))
    return lines


def _call_line(asked: dict[str, Any], call: dict[str, Any] | None) -> Text:
    arguments = json.dumps(asked.get("arguments", {}), ensure_ascii=False)
    head = Text.assemble("  ⚙ ", (str(asked.get("name")), "bold"),
                         f"({asked.get('id')}) ", (_short(arguments), "dim"))  # fmt: skip
    if call is None:
        return head
    state = str(call.get("state"))
    head.append(f"\n      {describe_json(call.get('disposition', {}))} · ")
    head.append(state, STATE_STYLES.get(state, ""))
    if call.get("attempts", 0) > 1:
        head.append(f" · attempt {call['attempts']}")
    result = call.get("result")
    if result:
        style = "" if result.get("status") == "ok" else "red"
        head.append(f"\n      → {_short(result_text(result))}", style)
    elif state in ("ready", "running"):
        head.append("\n      … running" if state == "running" else "\n      … to run")
    output = call.get("output")
    if isinstance(output, dict) and output.get("delivered"):
        head.append(f"\n      ⋯ {_stored_output(output)}", "dim")
    return head


def _stored_output(output: dict[str, Any]) -> str:
    """A call's stored output in one line: how much, the last progress, the last line."""
    words = [f"streamed {output.get('delivered')} event(s)"]
    progress = output.get("progress")
    if isinstance(progress, dict):
        words.append(progress_text(progress))
    lines = [e for e in output.get("events", []) if e.get("type") != "progress"]
    if lines:
        last = str(lines[-1].get("text", "")).rstrip("\n").rsplit("\n", 1)[-1]
        words.append(f"last: {_short(last)}")
    return " · ".join(words)


def progress_text(event: dict[str, Any]) -> str:
    """A progress event as `38% compiling 3 of 8`."""
    fraction = event.get("fraction")
    shown = f"{fraction:.0%}" if isinstance(fraction, int | float) else "?%"
    message = str(event.get("text", ""))
    return f"{shown} {_short(message)}" if message else shown


def live(document: dict[str, Any], heard: list[LiveCall]) -> Text | None:
    """The live panel: each call of the session heard streaming and not ended in the
    document (which may not show it running yet: starting a call makes no event), with
    its latest progress and its last lines; None when there is none to show."""
    calls: dict[str, dict[str, Any]] = document.get("calls", {})
    shown = [c for c in heard if calls.get(c.call_id, {}).get("state") not in ENDED]
    if not shown:
        return None
    text = Text()
    for n, call in enumerate(shown):
        if n:
            text.append("\n")
        text.append("⚙ ", "cyan")
        text.append(call.tool, "bold")
        text.append(f" ({call.call_id})", "dim")
        if call.attempt > 1:
            text.append(f" · attempt {call.attempt}", "dim")
        if call.progress is not None:
            text.append(f"  {progress_text(call.progress)}", "cyan")
        for where, line in list(call.lines)[-LIVE_SHOWN_LINES:]:
            text.append(f"\n  {where}| ", "dim")
            text.append(_short(line), "red" if where == "stderr" else "")
    return text


@dataclass(frozen=True)
class PendingRow:
    """One open call in the Pending panel."""

    token: str
    call_id: str
    tool: str
    state: str
    why: str
    since: str
    expiry: str


def pending(document: dict[str, Any], now_ms: int) -> list[PendingRow]:
    """The calls a person can end: deferred ones and those of unknown outcome, in the
    session's call order."""
    rows = []
    for call in document.get("calls", {}).values():
        if call.get("state") not in PENDING_STATES:
            continue
        why = call.get("label") or call.get("defer_reason") or ""
        if call["state"] == "unknown_outcome":
            why = "unknown outcome"
        rows.append(PendingRow(call["token"], call["id"], call["tool"], call["state"], why,
                               ago(call.get("updated_ms"), now_ms),
                               until(call.get("expires_ms"), now_ms)))  # fmt: skip
    return rows


def header(document: dict[str, Any]) -> Text:
    """The session's id, agent, status and conditions, then why it is where it is."""
    status = str(document.get("status"))
    extra = list(document.get("conditions", [])[1:])
    text = Text.assemble((str(document.get("id")), "bold"), f"  {document.get('agent_slug')}  ",
                         (status, f"bold {STATUS_STYLES.get(status, '')}"))  # fmt: skip
    if extra:
        text.append(f"  ({', '.join(extra)})", "magenta")
    text.append(f"  v{document.get('version')}\n", "dim")
    text.append(str(document.get("why", "")), "italic")
    return text


__all__ = ["PendingRow", "ago", "conversation", "header", "live", "pending",
           "progress_text", "until"]  # fmt: skip
