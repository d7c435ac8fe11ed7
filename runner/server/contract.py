"""agents-server's shapes over our sessions (docs/agents-server.md): its statuses, the
session body (metadata, `session.turns`, `pending`), its run modes and `wait`/`timeout`,
and the runs this process starts in the background (`Runs`).

Its six statuses from our seven, field by field (our own status stays under `state`):

    ours          agents-server      `status_detail`
    running       running            when a run is active (this process's, or a lease held)
    running       ready              otherwise: it can progress, `resume` moves it on
    waiting       waiting_external   only calls from outside (deferred, detached) remain
    completed     idle               the agent answered
    frozen        paused             an operator stopped it
    failed        failed             why its model call failed
    quarantined   failed             "quarantined: <why>" (resume with unquarantine)
    cancelled     failed             "cancelled" (ours is final: it never runs again)
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal

from runner.server.problems import Problem
from runner.server.visibility import View
from runner.session import Session, SessionTail, TrackedCall, pending_entry
from runner.stores import Lease

log = logging.getLogger(__name__)

RunMode = Literal["none", "step", "until_blocked"]
RUN_MODES: tuple[RunMode, ...] = ("none", "step", "until_blocked")
#: `timeout` of a `wait=true` request: the default and the most (seconds).
DEFAULT_WAIT_S, MAX_WAIT_S = 120.0, 600.0
#: agents-server's statuses, in its doc's order.
STATUSES = ("ready", "running", "waiting_external", "idle", "paused", "failed")
_BY_STATE: Mapping[str, str] = MappingProxyType({
    "waiting": "waiting_external", "completed": "idle", "frozen": "paused",
    "failed": "failed", "quarantined": "failed", "cancelled": "failed",
})  # fmt: skip


def status_of(session: SessionTail, active: bool) -> str:
    """agents-server's status of `session` (`active`: a run is going on it)."""
    if session.status == "running":
        return "running" if active else "ready"
    return _BY_STATE[session.status]


def status_detail(session: SessionTail) -> str | None:
    if session.status == "failed":
        return session.failure_reason or "failed"
    if session.status == "quarantined":
        return f"quarantined: {session.quarantine_reason}"
    if session.status == "cancelled":
        return "cancelled"
    return None


def held(lease: Lease | None, now_ms: int) -> bool:
    """Whether a live holder has the session's lease (a run in some process)."""
    return lease is not None and bool(lease.owner) and lease.expires_ms > now_ms


def iso(ms: int) -> str:
    """Epoch milliseconds as agents-server's timestamps (RFC 3339, UTC, `Z`)."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_iso(text: str, where: str) -> int:
    """An RFC 3339 timestamp (as `iso` writes them) as epoch milliseconds; 400 if not one."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise Problem(400, "bad_request", f"{where}: not an RFC 3339 timestamp:"
                      f" {text[:60]!r}") from exc  # fmt: skip
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def meta(session: SessionTail, active: bool) -> dict[str, Any]:
    """A session's metadata (what listings and `snapshot` carry), plus our `state`."""
    return {
        "session_id": session.id, "agent": session.agent_slug, "parent_session_id": None,
        "owner": None, "status": status_of(session, active),
        "status_detail": status_detail(session), "version": session.version,
        "created_at": iso(session.created_ms), "updated_at": iso(session.updated_ms),
        "state": session.status,
    }  # fmt: skip


def deferred_entry(call: TrackedCall) -> dict[str, Any]:
    """One call the session waits on, in agents-server's shape (`call` as the model made
    it, arguments a JSON string) with our fields (`state`, `reason`, ...) beside."""
    entry = pending_entry(call)
    entry["call"] = {"id": call.id, "type": "function",
                     "function": {"name": call.tool,
                                  "arguments": json.dumps(call.arguments)}}  # fmt: skip
    return entry


def body(session: Session, active: bool, view: View) -> dict[str, Any]:
    """The session as agents-server's session endpoints answer it: metadata, its turns
    under `session`, its `pending` calls (`session` must hold its whole history)."""
    turns = [turn.model_dump(mode="json") for turn in session.turns]
    pending = view.calls([deferred_entry(c) for c in session.waiting_on()])
    return view.body({**meta(session, active), "session": {"turns": turns},
                      "pending": pending})  # fmt: skip


def run_mode(value: str | bool | None, where: str = "body.run") -> RunMode:
    """`run`: agents-server's mode names, or our boolean (true: until_blocked)."""
    if value is None or value is True:
        return "until_blocked"
    if value is False:
        return "none"
    if value not in RUN_MODES:
        raise Problem(400, "bad_request", f"{where}: expected one of"
                      f" {', '.join(RUN_MODES)}, got {str(value)[:40]!r}")  # fmt: skip
    return value


def wait_timeout(timeout: float | None) -> float:
    """`timeout` in seconds: 120 by default, at most 600; 400 when negative."""
    if timeout is None:
        return DEFAULT_WAIT_S
    if timeout < 0:
        raise Problem(400, "bad_request", f"query.timeout: must be 0 or more, got {timeout}")
    return min(timeout, MAX_WAIT_S)


class Runs:
    """The runs this process started, one at most per session: agents-server's `wait`
    waits on them, its `running` status sees them. Each is a task on the server's loop;
    a run's outcome is in the store, so one that fails is logged and forgotten."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def active(self, session_id: str) -> bool:
        task = self._tasks.get(session_id)
        return task is not None and not task.done()

    def start(self, session_id: str, run: Callable[[], Awaitable[object]]) -> bool:
        """Start `run` for the session unless one is going (False then)."""
        if self.active(session_id):
            return False

        async def go() -> None:
            try:
                await run()
            except Problem as exc:  # an engine refusal (busy, failed, ...): it is stored
                log.info("run of %s stopped: %s", session_id, exc.detail)
            except Exception:
                log.exception("run of %s failed", session_id)
            finally:
                if self._tasks.get(session_id) is asyncio.current_task():
                    del self._tasks[session_id]

        self._tasks[session_id] = asyncio.get_running_loop().create_task(go())
        return True

    async def wait(self, session_id: str, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the session's run to stop; True when none is going.
        A client that goes away while waiting does not stop the run (it is shielded)."""
        task = self._tasks.get(session_id)
        if task is None or task.done():
            return True
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        return bool(done)

    async def close(self) -> None:
        """Cancel the runs still going (the server stops; their sessions are stored)."""
        tasks = [t for t in self._tasks.values() if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
