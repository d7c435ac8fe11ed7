"""The console's one main screen: the session list (filtered by typing) on the left; the
selected session on the right (header, conversation, the live output of its running
calls when they stream any, the Pending panel); the message editor and a status line at
the bottom; the key bindings in the footer.

Keys (none that a text field uses, so typing in the filter or the editor never triggers
an action): Ctrl+L puts the cursor in the message editor, Ctrl+F in the filter; Ctrl+O
moves the selection in the Pending panel, Ctrl+N answers the selected call (the editor
says which; Enter sends it with autoResume), Ctrl+B fails it after asking why, Escape
leaves answer mode. With an agent file, Enter outside answer mode starts a new session
with the prompt and runs it live. The operator's actions (Ctrl+R resume, Ctrl+S cancel,
Ctrl+T retry an unknown_outcome call, Ctrl+P un-quarantine) each say what they will do
and ask first. Every action runs in a worker: the screen stays live.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import anyio
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, RichLog, Static

from runner.tui import render
from runner.tui.render import PendingRow
from runner.tui.screens import ConfirmScreen, ReasonScreen
from runner.tui.source import SessionRow, Source, SourceError, plural

log = logging.getLogger(__name__)

#: Quiet waits for a change (about a second each) between refreshes that only move ages.
QUIET_REFRESH_EVERY = 5
#: How often the live panel looks for output heard since it was last drawn (seconds).
LIVE_REFRESH_S = 0.2

CSS = """
#body { height: 1fr; }
#left { width: 48; border-right: solid $primary-darken-2; }
#filter { margin: 0; }
#sessions { height: 1fr; }
#right { width: 1fr; }
#header { height: auto; max-height: 5; padding: 0 1; background: $boost; }
#conversation { height: 1fr; padding: 0 1; }
#live { height: auto; max-height: 10; padding: 0 1; border-top: solid $primary-darken-2;
        display: none; }
#pending-title { height: 1; padding: 0 1; background: $warning-darken-3; }
#pending { height: auto; max-height: 8; }
#editor-label { height: 1; padding: 0 1; color: $text-muted; }
#editor-label.answering { color: $warning; text-style: bold; }
#status { height: 1; padding: 0 1; }
#status.error { color: $error; text-style: bold; }
"""


class ConsoleScreen(Screen[None]):
    DEFAULT_CSS = CSS
    # No key a text field uses (Textual's Input and TextArea: Ctrl+A/E/K/U/W/X/Y/Z/D/V/C,
    # readline's alike): these are priority bindings, taken before the focused field.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+l", "focus_editor", "message", priority=True),
        Binding("ctrl+o", "next_pending", "next call", priority=True),
        Binding("ctrl+n", "answer", "answer", priority=True),
        Binding("ctrl+b", "fail_call", "fail call", priority=True),
        Binding("escape", "leave_answer", "leave answer", show=False),
        Binding("ctrl+r", "resume", "resume", priority=True),
        Binding("ctrl+s", "cancel_session", "cancel", priority=True),
        Binding("ctrl+t", "retry_call", "retry", priority=True),
        Binding("ctrl+p", "unquarantine", "unquarantine", priority=True),
        Binding("ctrl+g", "history", "history", priority=True),
        Binding("ctrl+f", "focus_filter", "filter", priority=True),
        Binding("ctrl+q", "app.quit", "quit", priority=True),
        Binding("up", "move(-1)", show=False),
        Binding("down", "move(1)", show=False),
    ]

    def __init__(self, source: Source, follow: bool = True) -> None:
        super().__init__()
        self.source = source
        self.follow = follow
        self.rows: dict[str, SessionRow] = {}
        self.session_id: str | None = None
        self.document: dict[str, Any] | None = None
        self.full_history: set[str] = set()
        self.pending_rows: list[PendingRow] = []
        self.pending_token: str | None = None
        self.answering: PendingRow | None = None
        self.status_text = ""
        self._shown: tuple[Any, ...] | None = None
        self._live_shown: tuple[Any, ...] | None = None
        self._listed: list[str] = []
        self._refreshing = anyio.Lock()

    # --- layout ------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Horizontal(id="body"):
            with Vertical(id="left"):
                yield Input(placeholder="filter: type an id, agent or condition", id="filter")
                yield DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
            with Vertical(id="right"):
                yield Static("no session selected", id="header")
                yield RichLog(id="conversation", wrap=True, markup=False, highlight=False,
                              min_width=20)  # fmt: skip
                yield Static("", id="live", markup=False)
                yield Static("Pending (0)", id="pending-title")
                yield DataTable(id="pending", cursor_type="row")
        yield Static("", id="editor-label")
        yield Input(placeholder="message", id="editor")
        yield Static("", id="status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        sessions = self.query_one("#sessions", DataTable)
        sessions.add_columns("session", "status", "updated", "conditions", "agent")
        pending = self.query_one("#pending", DataTable)
        pending.add_columns("tool", "call", "state", "reason", "waiting", "expires")
        self._label_editor()
        self.query_one("#filter", Input).focus()
        self.run_worker(self.refresh_data(), group="refresh")
        if self.follow:
            self.run_worker(self._follow(), group="follow")
        self.set_interval(LIVE_REFRESH_S, self.show_live)

    # --- reading -----------------------------------------------------------------------

    async def _follow(self) -> None:
        quiet = 0
        while True:
            try:
                changed = await self.source.changes()
            except Exception as exc:  # shown and logged; the next wait tries again
                log.warning("waiting for changes failed: %s", exc)
                self.say(f"cannot follow changes: {exc}", error=True)
                await anyio.sleep(1)
                changed = False
            quiet = 0 if changed else quiet + 1
            if changed or quiet >= QUIET_REFRESH_EVERY:
                quiet = 0
                await self.refresh_data()

    async def refresh_data(self) -> None:
        """Read the list and the selected session again and draw what changed."""
        async with self._refreshing:
            try:
                now = await self.source.now_ms()
                self._show_rows(await self.source.sessions(), now)
                chosen = self.session_id
                if chosen is not None:
                    document = await self.source.session(
                        chosen, history=chosen in self.full_history
                    )
                    if chosen == self.session_id:
                        self._show_session(document, now)
            except SourceError as exc:
                self.say(str(exc), error=True)
            except Exception as exc:  # shown and logged: the console keeps running
                log.exception("console refresh failed")
                self.say(f"cannot read the sessions: {type(exc).__name__}: {exc}", error=True)

    def _show_rows(self, rows: list[SessionRow], now: int) -> None:
        self.rows = {r.id: r for r in rows}
        words = self.query_one("#filter", Input).value
        shown = [r for r in rows if r.matches(words)]
        table = self.query_one("#sessions", DataTable)
        cells = {r.id: (_short_id(r.id), r.status, render.ago(r.updated_ms, now),
                        ", ".join(r.conditions[1:]), r.agent) for r in shown}  # fmt: skip
        if [r.id for r in shown] != self._listed:
            table.clear()
            for row in shown:
                table.add_row(*cells[row.id], key=row.id)
            self._listed = [r.id for r in shown]
            if self.session_id in self._listed:
                table.move_cursor(row=self._listed.index(self.session_id), animate=False)
            elif shown:
                self._select(shown[0].id)
            return
        for key, values in cells.items():
            for column, value in zip(table.columns, values, strict=True):
                table.update_cell(key, column, value)

    def _show_session(self, document: dict[str, Any], now: int) -> None:
        self.document = document
        self.query_one("#header", Static).update(render.header(document))
        shown = (document.get("id"), document.get("version"), document.get("first_turn", 0))
        if shown != self._shown:
            log_view = self.query_one("#conversation", RichLog)
            log_view.clear()
            for line in render.conversation(document):
                log_view.write(line)
            self._shown = shown
        self.pending_rows = render.pending(document, now)
        table = self.query_one("#pending", DataTable)
        table.clear()
        for row in self.pending_rows:
            table.add_row(row.tool, row.call_id, row.state, row.why, row.since, row.expiry,
                          key=row.token)  # fmt: skip
        tokens = [r.token for r in self.pending_rows]
        if self.pending_token not in tokens:
            self.pending_token = tokens[0] if tokens else None
        if self.pending_token is not None:
            table.move_cursor(row=tokens.index(self.pending_token), animate=False)
        self.query_one("#pending-title", Static).update(
            f"Pending ({len(tokens)})  Ctrl+O next · Ctrl+N answer · Ctrl+B fail"
        )
        self._live_shown = None  # a new document: draw the panel again
        self.show_live()

    def show_live(self) -> None:
        """Draw the live panel again if output was heard, or the session changed, since
        it was last drawn (the source fills `live` as the output arrives)."""
        document, heard = self.document, self.source.live
        key = (heard.generation, self.session_id)
        if key == self._live_shown:
            return
        self._live_shown = key
        panel = self.query_one("#live", Static)
        text = None
        if document is not None and self.session_id is not None:
            text = render.live(document, heard.of(self.session_id))
        panel.display = text is not None
        panel.update(text or "")

    def _select(self, session_id: str) -> None:
        if session_id == self.session_id:
            return
        self.session_id, self._shown, self.pending_token = session_id, None, None
        if self.answering is not None:
            self.action_leave_answer()
        self.run_worker(self.refresh_data(), group="refresh")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # Read the cursor as it is now: a rebuilt table posts highlights of rows it
        # passed through on its way back to the selected one.
        table = event.data_table
        if table.row_count == 0:
            return
        key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        if key is None:
            return
        if table.id == "sessions":
            self._select(key)
        elif table.id == "pending":
            self.pending_token = key

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.run_worker(self.refresh_data(), group="refresh")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self.query_one("#sessions", DataTable).focus()
        elif event.input.id == "editor":
            self.send(event.value)

    def action_move(self, by: int) -> None:
        table = self.query_one("#sessions", DataTable)
        if table.row_count:
            table.move_cursor(row=max(0, min(table.row_count - 1, table.cursor_row + by)))

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_focus_editor(self) -> None:
        self.query_one("#editor", Input).focus()

    def action_history(self) -> None:
        if self.session_id is not None:
            self.full_history.add(self.session_id)
            self._shown = None
            self.run_worker(self.refresh_data(), group="refresh")

    # --- the status line and the editor ---------------------------------------------------

    def say(self, message: str, *, error: bool = False) -> None:
        """One line at the bottom: what an action did, or why it did not."""
        self.status_text = ("error: " if error else "") + message
        status = self.query_one("#status", Static)
        status.update(self.status_text)
        status.set_class(error, "error")

    def _label_editor(self) -> None:
        label = self.query_one("#editor-label", Static)
        if self.answering is not None:
            call = self.answering
            text = (f"Answering {call.call_id} ({call.tool}): text, JSON or a UserToolResponse;"
                    " Enter sends with autoResume, Esc leaves")  # fmt: skip
        elif self.source.can_start:
            text = "Prompt (Ctrl+L): Enter starts a new session with it and runs it here"
        else:
            text = "Ctrl+O selects a pending call, Ctrl+N answers it, Ctrl+B fails it"
        label.update(text)
        label.set_class(self.answering is not None, "answering")

    def send(self, text: str) -> None:
        editor = self.query_one("#editor", Input)
        call = self.answering
        if call is not None:

            def answered() -> None:
                editor.value = ""
                self.action_leave_answer()

            self.act(f"sending the answer to {call.call_id}…",
                     lambda: self.source.complete(call.token, text), answered)  # fmt: skip
        elif self.source.can_start:
            if not text.strip():
                self.say("the prompt is empty", error=True)
                return
            self.act("starting a new session…", lambda: self._start(text),
                     lambda: setattr(editor, "value", ""))  # fmt: skip
        else:
            self.say("nothing to send: select a pending call (Ctrl+O) and answer it (Ctrl+N),"
                     " or start the console with --agent-file to send prompts",
                     error=True)  # fmt: skip

    async def _start(self, prompt: str) -> str:
        session_id = await self.source.start(prompt)
        self._select(session_id)
        self.say(f"started {session_id}; running it…")
        await self.refresh_data()
        return await self.source.run(session_id)

    def act(self, busy: str, work: Callable[[], Awaitable[str]],
            done: Callable[[], None] | None = None) -> None:  # fmt: skip
        """Run an action in a worker: its line on success, its error otherwise (never a
        traceback: an unexpected failure is logged and shown)."""

        async def go() -> None:
            self.say(busy)
            try:
                message = await work()
            except SourceError as exc:
                self.say(str(exc), error=True)
            except Exception as exc:
                log.exception("console action failed")
                self.say(f"unexpected failure: {type(exc).__name__}: {exc}", error=True)
            else:
                if done is not None:
                    done()
                self.say(message)
            await self.refresh_data()

        self.run_worker(go(), group="actions")

    # --- the Pending panel ---------------------------------------------------------------

    def selected_call(self) -> PendingRow | None:
        return next((r for r in self.pending_rows if r.token == self.pending_token), None)

    def action_next_pending(self) -> None:
        if not self.pending_rows:
            self.say("no pending call in this session", error=True)
            return
        tokens = [r.token for r in self.pending_rows]
        at = tokens.index(self.pending_token) if self.pending_token in tokens else -1
        self.pending_token = tokens[(at + 1) % len(tokens)]
        self.query_one("#pending", DataTable).move_cursor(row=(at + 1) % len(tokens))
        chosen = self.selected_call()
        if chosen is not None:
            self.say(f"selected {chosen.call_id} ({chosen.tool})")

    def action_answer(self) -> None:
        call = self.selected_call()
        if call is None:
            self.say("no pending call to answer", error=True)
            return
        self.answering = call
        self._label_editor()
        self.query_one("#editor", Input).focus()

    def action_leave_answer(self) -> None:
        if self.answering is not None:
            self.answering = None
            self._label_editor()
            self.say("left answer mode")

    def action_fail_call(self) -> None:
        call = self.selected_call()
        if call is None:
            self.say("no pending call to fail", error=True)
            return

        def failed(reason: str | None) -> None:
            if reason:
                self.act(f"failing {call.call_id}…", lambda: self.source.fail(call.token, reason))

        self.app.push_screen(ReasonScreen(f"{call.call_id} ({call.tool})"), failed)

    # --- the operator's actions -----------------------------------------------------------

    def _confirm(self, title: str, what: str, work: Callable[[], Awaitable[str]]) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.act(f"{title.lower()}…", work)
            else:
                self.say(f"{title}: left as it is")

        self.app.push_screen(ConfirmScreen(title, what), answered)

    def _chosen(self) -> SessionRow | None:
        row = self.rows.get(self.session_id or "")
        if row is None:
            self.say("no session selected", error=True)
        return row

    def action_resume(self) -> None:
        row = self._chosen()
        if row is None:
            return
        sid = row.id
        if row.status in ("completed", "cancelled"):
            self.say(f"session {sid} is {row.status}: nothing to resume", error=True)
        elif row.status == "quarantined":
            self.say(f"session {sid} is quarantined: Ctrl+P lets it run again", error=True)
        elif row.status == "failed":
            self._confirm("Resume", f"Run failed session {sid} again with a fresh model-call"
                          f" budget (session resume --retry); it failed: {row.reason}",
                          lambda: self.source.resume(sid, retry=True))  # fmt: skip
        else:
            self._confirm("Resume", f"Step session {sid} ({row.status}) here until its final"
                          " answer or its next wait (session resume).",
                          lambda: self.source.resume(sid))  # fmt: skip

    def action_cancel_session(self) -> None:
        row = self._chosen()
        if row is None:
            return
        if row.status in ("completed", "cancelled"):
            self.say(f"session {row.id} is {row.status}: nothing to cancel", error=True)
            return
        ended = ("completed", "failed", "expired", "cancelled")
        calls = (self.document or {}).get("calls", {}).values()
        still_open = plural(len([c for c in calls if c.get("state") not in ended]), "open call")
        sid = row.id
        self._confirm("Cancel", f"Cancel session {sid} and its {still_open} (session"
                      " cancel). Nothing advances it afterwards.",
                      lambda: self.source.cancel(sid))  # fmt: skip

    def action_retry_call(self) -> None:
        chosen = self.selected_call()
        unknown = [r for r in self.pending_rows if r.state == "unknown_outcome"]
        call = chosen if chosen is not None and chosen.state == "unknown_outcome" else None
        call = call or (unknown[0] if unknown else None)
        if call is None:
            self.say("no call of unknown outcome in this session to retry", error=True)
            return
        token = call.token
        self._confirm("Retry", f"Call {call.call_id} ({call.tool}) may already have had its"
                      " external effects. Run it again anyway (session retry --force)?"
                      " Or leave it and settle it by answering or failing it.",
                      lambda: self.source.retry(token))  # fmt: skip

    def action_unquarantine(self) -> None:
        row = self._chosen()
        if row is None:
            return
        if row.status != "quarantined":
            self.say(f"session {row.id} is {row.status}, not quarantined", error=True)
            return
        sid = row.id
        self._confirm("Un-quarantine", f"Let quarantined session {sid} run again and resume it"
                      f" here (session resume --unquarantine); it was quarantined: {row.reason}",
                      lambda: self.source.resume(sid, unquarantine=True))  # fmt: skip


def _short_id(session_id: str) -> str:
    """Enough of an id to tell sessions apart in the list (the header shows it whole)."""
    return session_id if len(session_id) <= 12 else session_id[:11] + "…"


__all__ = ["ConsoleScreen"]
