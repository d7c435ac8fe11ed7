"""`StoreSource`: the console on a store opened in this process (`tui --store LOC`).

Actions go through an Engine (runner.session.engine) as the server's do: the agent a
session started with comes from the store, in asynchronous mode; a store without leases
(the file store) is driven single-process. Every store call runs in a worker thread, never
on the console's event loop. Live updates: a durable store's event log (a change shows as
a new `last_event_seq`, `wait_for_events` returns early on this process's own writes);
a store without one is polled. The live output of calls this process runs (a resume from
the console) comes from the engine's CallOutputBus (runner.session.output); a call
another process runs shows its stored output once it ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from runner.llm import LLMError
from runner.session import (
    AgentError,
    AgentSettings,
    Engine,
    LeaseBusy,
    SessionError,
    StepReport,
    StoreCapabilityError,
    UnknownToken,
    load_agent,
)
from runner.session.operator import conditions, session_document
from runner.session.output import LiveOutput
from runner.state import SessionTail, ToolResult, now_ms
from runner.stores import DurableStore, SessionStore, StoreError
from runner.tui.source import (
    CHANGE_WAIT_S,
    LiveCalls,
    SessionRow,
    Source,
    SourceError,
    answer_result,
)
from runner.tui.source import plural as _plural

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How long an autoResume waits for a lease someone has just let go (as the CLI does).
RESUME_LEASE_WAIT_S = 1.0
#: A session with at most this many turns before its recent part is read whole; a longer
#: one shows its recent part until the operator asks for the rest (Ctrl+G).
WHOLE_UP_TO_TURNS = 50
#: How often a store without an event log is read again.
POLL_S = 0.5


@contextmanager
def engine_errors() -> Iterator[None]:
    """The engine's and the store's expected failures, as messages for the operator."""
    try:
        yield
    except UnknownToken as exc:
        raise SourceError(f"no call has the continuation token {exc}") from exc
    except (AgentError, SessionError, StoreCapabilityError, LLMError, LeaseBusy) as exc:
        raise SourceError(str(exc)) from exc
    except StoreError as exc:
        log.warning("store error: %s", exc)
        raise SourceError(f"store error: {exc}") from exc


def describe(report: StepReport) -> str:
    """One line: where a step or resume left the session."""
    session = report.session
    line = f"session {session.id} is {session.status}"
    if session.status == "completed":
        first = (session.final_answer or "").strip().splitlines()
        return f"{line}: {first[0] if first else ''}"[:200]
    if session.status == "waiting":
        return f"{line} on {_plural(len(session.waiting_on()), 'call')}"
    if session.status == "failed":
        return f"{line}: {session.failure_reason}"
    return line


class StoreSource(Source):
    """The console's source on `store` (which the caller opened and closes).
    `agent_file`: what a prompt typed in the editor starts; `clock`: the time ages are
    measured against (default: the store's); `settings`: what the agents it runs are given
    (lease length, audit, egress network; `tui` reads them from its environment);
    `engine`: what the actions go through (on `store`; default: one made with `settings`)."""

    def __init__(self, store: SessionStore, agent_file: Path | None = None,
                 clock: Callable[[], int] | None = None,
                 whole_up_to: int = WHOLE_UP_TO_TURNS,
                 settings: AgentSettings | None = None,
                 engine: Engine | None = None) -> None:  # fmt: skip
        self.store = store
        agents = settings or AgentSettings()
        self.engine = engine if engine is not None else Engine(
            store, audit=agents.audit, lease_s=agents.lease_s,
            egress_network=agents.egress_network,
            single_process=not isinstance(store, DurableStore))  # fmt: skip
        self.agent_file = agent_file
        self.api_keys = agents.api_keys
        self.clock = clock
        self.whole_up_to = whole_up_to
        self.description = store.description
        self.can_start = agent_file is not None
        self._seen_seq: int | None = None
        self.live = LiveCalls()
        self._unsubscribe = self.engine.call_output.subscribe(self._heard)

    def _heard(self, item: LiveOutput) -> None:
        self.live.add(item.to_json())

    async def aclose(self) -> None:
        self._unsubscribe()

    @property
    def durable(self) -> DurableStore | None:
        return self.store if isinstance(self.store, DurableStore) else None

    async def _thread(self, function: Callable[..., T], *args: Any) -> T:
        with engine_errors():
            return await anyio.to_thread.run_sync(function, *args)

    def _now(self) -> int:
        if self.clock is not None:
            return self.clock()
        return self.durable.now_ms() if self.durable is not None else now_ms()

    # --- reads -----------------------------------------------------------------------

    async def now_ms(self) -> int:
        return await self._thread(self._now)

    async def sessions(self) -> list[SessionRow]:
        def read() -> list[SessionRow]:
            now, rows = self._now(), []
            for summary in self.store.list():
                session = self.store.load(summary.id)
                found = conditions(session, self._lease(summary.id), now)
                why = session.failure_reason or session.quarantine_reason
                rows.append(SessionRow(summary.id, session.status, tuple(found),
                                       session.agent_slug, session.updated_ms, why))  # fmt: skip
            return sorted(rows, key=lambda r: (-r.updated_ms, r.id))

        return await self._thread(read)

    def _lease(self, session_id: str) -> Any:
        return self.durable.lease(session_id) if self.durable is not None else None

    async def session(self, session_id: str, *, history: bool = False) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            session = self.store.load(session_id, history=history)
            if not session.has_history and session.first_turn <= self.whole_up_to:
                session = self.store.with_history(session)
            late = self.durable.late_results(session_id) if self.durable is not None else []
            return session_document(session, self._lease(session_id), self._now(), late)

        return await self._thread(read)

    async def changes(self, timeout_s: float = CHANGE_WAIT_S) -> bool:
        durable = self.durable
        if durable is None:
            await anyio.sleep(min(timeout_s, POLL_S))
            return True
        if self._seen_seq is None:
            self._seen_seq = await self._thread(durable.last_event_seq)
        # This process's own writes notify the wait at once; another's show in the seq.
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            await self._thread(durable.wait_for_events, max(0.0, min(left, POLL_S)))
            seq = await self._thread(durable.last_event_seq)
            if seq != self._seen_seq:
                self._seen_seq = seq
                return True
            if time.monotonic() >= deadline:
                return False

    # --- the calls a session waits on -------------------------------------------------

    async def complete(self, token: str, text: str) -> str:
        return await self._complete(token, text, None)

    async def fail(self, token: str, reason: str) -> str:
        if not reason.strip():
            raise SourceError("the reason is empty; say why the call failed")
        return await self._complete(token, None, reason.strip())

    async def _complete(self, token: str, text: str | None, reason: str | None) -> str:
        if text is not None:
            result = answer_result(text)
        else:
            result = ToolResult.error("TOOL_FAILED", reason or "")
        try:
            with engine_errors():
                report = await self.engine.complete(token, result)
        except SourceError as exc:
            if isinstance(exc.__cause__, UnknownToken):
                raise SourceError(f"no call has the continuation token {token} in the"
                                  f" {self.description}") from exc.__cause__  # fmt: skip
            raise
        answered = report.session.call_by_token(token)
        call = answered.id if answered is not None else token
        if report.conflicting:
            raise SourceError(
                f"call {call} was already completed by someone else with a"
                " different result; yours was refused, nothing changed"
            )
        if report.already_completed:
            raise SourceError(f"call {call} was already completed; nothing applied")
        if report.late:
            raise SourceError(f"call {call} had expired; the result is kept as late and"
                              " changes nothing")  # fmt: skip
        done = f"{'failed' if reason is not None else 'answered'} {call}"
        session = report.session
        if session.status != "running":
            return f"{done}; session {session.id} is {session.status}"
        return f"{done}; {await self._auto_resume(session)}"

    async def _auto_resume(self, session: SessionTail) -> str:
        """Continue the session here unless a live process holds it (which then does)."""
        holder = await self._thread(self._live_holder, session.id)
        if holder is not None:
            return f"session {session.id} is held by {holder}, which continues it"
        try:
            with engine_errors():
                report = await self.engine.resume(session.id, lease_wait_s=RESUME_LEASE_WAIT_S)
        except SourceError as exc:
            if isinstance(exc.__cause__, LeaseBusy):  # taken meanwhile: the taker goes on
                return f"session {session.id} is held by another process, which continues it"
            raise
        return describe(report)

    def _live_holder(self, session_id: str) -> str | None:
        lease = self._lease(session_id)
        if lease is not None and lease.owner and lease.expires_ms > self._now():
            return str(lease.owner)
        return None

    async def retry(self, token: str) -> str:
        found = await self._thread(self.store.find, token)
        if found is None:
            raise SourceError(f"no call has the continuation token {token}")
        with engine_errors():
            session = await self.engine.retry(found.session_id, token, force=True)
        return f"call {found.call_id} will run again; session {session.id} is {session.status}"

    # --- sessions ----------------------------------------------------------------------

    async def resume(self, session_id: str, *, unquarantine: bool = False,
                     retry: bool = False) -> str:  # fmt: skip
        with engine_errors():
            report = await self.engine.resume(session_id, unquarantine=unquarantine,
                                              retry=retry)  # fmt: skip
        return describe(report)

    async def cancel(self, session_id: str) -> str:
        with engine_errors():
            session = await self.engine.cancel(session_id)
        return f"session {session.id} is {session.status}"

    async def start(self, prompt: str) -> str:
        if self.agent_file is None:
            raise SourceError("no --agent-file: a prompt can start a session only with one")
        agent = await self._thread(load_agent, self.agent_file, self.api_keys)
        with engine_errors():
            return (await self.engine.start(agent.with_mode("asynchronous"), prompt)).id

    async def run(self, session_id: str) -> str:
        return await self.resume(session_id)


__all__ = ["StoreSource"]
