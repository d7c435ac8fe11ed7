"""`ServerSource`: the console on `agents-runner serve` (`tui --server URL --token T`).

The endpoints are the server's (docs/openapi.json): the session list and documents, the
continuations (complete and fail with `resume: true`, agents-exe's autoResume), the
operator's resume, cancel and retry. Live updates come from GET /v1/events
(Server-Sent Events, docs/events.md), followed in a background task that reconnects with
Last-Event-ID; any logged event signals `changes`, and a running call's live output
(`call.output`, which has no id) goes to `live`. A problem answer (409 for a call someone else
completed, 404, 410...) becomes a SourceError carrying its detail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx

from runner.session import AgentError, load_agent
from runner.tui.source import (
    CHANGE_WAIT_S,
    LiveCalls,
    SessionRow,
    Source,
    SourceError,
    answer_result,
    answer_value,
    plural,
)

log = logging.getLogger(__name__)

#: A resume can run a whole turn (model calls, tools): wait that long for its answer.
REQUEST_TIMEOUT_S = 300.0
#: Pause before following the event stream again after it broke.
RECONNECT_S = 1.0


def describe(report: dict[str, Any]) -> str:
    """One line from a step report's JSON (StepReport.to_dict)."""
    line = f"session {report.get('session_id')} is {report.get('status')}"
    if report.get("status") == "completed":
        first = str(report.get("final_answer") or "").strip().splitlines()
        return f"{line}: {first[0] if first else ''}"[:200]
    if report.get("status") == "waiting":
        return f"{line} on {plural(len(report.get('deferred_calls') or []), 'call')}"
    if report.get("reason"):
        return f"{line}: {report['reason']}"
    return line


class ServerSource(Source):
    """The console's source on the server at `url`, with the bearer `token` (None for a
    server run with --no-auth). `agent_file`: what a prompt typed in the editor starts
    (sent inline; it needs an operator token)."""

    def __init__(self, url: str, token: str | None, agent_file: Path | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:  # fmt: skip
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.description = f"server {self.url}"
        self.agent_file = agent_file
        self.can_start = agent_file is not None
        self._http = httpx.AsyncClient(base_url=self.url, headers=headers,
                                       timeout=REQUEST_TIMEOUT_S, transport=transport)  # fmt: skip
        self._listener: asyncio.Task[None] | None = None
        self.last_event_id: str | None = None
        self._generation = 0
        self._signalled = anyio.Event()
        #: The stream's state, for the title bar: connecting, live, or why it broke.
        self.stream_state = "connecting"
        self.live = LiveCalls()

    async def _request(self, method: str, path: str, body: Any = None) -> Any:
        try:
            answer = await self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise SourceError(f"cannot reach the server at {self.url}: {exc}") from exc
        if answer.status_code >= 400:
            raise SourceError(_problem(answer))
        return answer.json()

    async def now_ms(self) -> int:
        return int(time.time() * 1000)

    async def sessions(self) -> list[SessionRow]:
        found = await self._request("GET", "/v1/sessions")
        # `state` is our status (`status` is agents-server's); an older server has no `state`
        rows = [SessionRow(r["id"], r.get("state", r["status"]),
                           tuple(r.get("conditions") or [r.get("state", r["status"])]),
                           r.get("agent_slug", ""), int(r.get("updated_ms", 0)),
                           r.get("reason")) for r in found["sessions"]]  # fmt: skip
        return sorted(rows, key=lambda r: (-r.updated_ms, r.id))

    async def session(self, session_id: str, *, history: bool = False) -> dict[str, Any]:
        document: dict[str, Any] = await self._request("GET", f"/v1/sessions/{session_id}")
        # the screens draw our status: the server gives it as `state` beside agents-server's
        document["status"] = document.get("state", document.get("status"))
        return document

    async def complete(self, token: str, text: str) -> str:
        answer_result(text)  # a malformed UserToolResponse is refused before it is sent
        body = {"result": answer_value(text), "resume": True}
        return self._woken_line(await self._request("POST", f"/v1/continuations/{token}", body),
                                "answered")  # fmt: skip

    async def fail(self, token: str, reason: str) -> str:
        if not reason.strip():
            raise SourceError("the reason is empty; say why the call failed")
        body = {"reason": reason.strip(), "resume": True}
        answer = await self._request("POST", f"/v1/continuations/{token}/fail", body)
        return self._woken_line(answer, "failed")

    @staticmethod
    def _woken_line(answer: dict[str, Any], verb: str) -> str:
        session = answer.get("session_id")
        if answer.get("status") == "already_completed":
            raise SourceError(f"the call was already completed in session {session};"
                              " nothing applied")  # fmt: skip
        done = f"{verb} the call"
        resumed = answer.get("resumed")
        if isinstance(resumed, dict):
            return f"{done}; {describe(resumed)}"
        if answer.get("session_status") == "running":
            return f"{done}; session {session} is held by a live process, which continues it"
        return f"{done}; session {session} is {answer.get('session_status')}"

    async def resume(self, session_id: str, *, unquarantine: bool = False,
                     retry: bool = False) -> str:  # fmt: skip
        body = {"unquarantine": unquarantine, "retry": retry}
        return describe(await self._request("POST", f"/v1/sessions/{session_id}/resume", body))

    async def cancel(self, session_id: str) -> str:
        answer = await self._request("POST", f"/v1/sessions/{session_id}/cancel")
        return f"session {answer['session_id']} is {answer['status']}"

    async def retry(self, token: str) -> str:
        answer = await self._request("POST", f"/v1/continuations/{token}/retry", {"force": True})
        return (f"call {answer['retried']} will run again; session {answer['session_id']}"
                f" is {answer['status']}")  # fmt: skip

    async def start(self, prompt: str) -> str:
        if self.agent_file is None:
            raise SourceError("no --agent-file: a prompt can start a session only with one")
        path = self.agent_file
        try:
            document = await anyio.to_thread.run_sync(lambda: load_agent(path).to_document())
        except AgentError as exc:
            raise SourceError(str(exc)) from exc
        made = await self._request(
            "POST", "/v1/sessions", {"agent": document, "prompt": prompt, "run": "none"}
        )  # `run` runs it
        return str(made["session_id"])

    async def run(self, session_id: str) -> str:
        return await self.resume(session_id)

    # --- live updates ------------------------------------------------------------------

    async def changes(self, timeout_s: float = CHANGE_WAIT_S) -> bool:
        if self._listener is None:
            self._listener = asyncio.create_task(self._follow(), name="tui-events")
        seen, signalled = self._generation, self._signalled
        with anyio.move_on_after(timeout_s):
            await signalled.wait()
        return self._generation != seen

    def _signal(self) -> None:
        self._generation += 1
        self._signalled.set()
        self._signalled = anyio.Event()

    async def _follow(self) -> None:
        """Follow GET /v1/events for as long as the source lives, reconnecting."""
        while True:
            try:
                await self._stream()
            except httpx.HTTPError as exc:
                self.stream_state = f"event stream broke ({exc}); reconnecting"
                log.warning("event stream from %s broke: %s", self.url, exc)
            except SourceError as exc:
                self.stream_state = str(exc)
                log.warning("event stream from %s refused: %s", self.url, exc)
            await anyio.sleep(RECONNECT_S)

    async def _stream(self) -> None:
        headers = {"Last-Event-ID": self.last_event_id} if self.last_event_id else {}
        timeout = httpx.Timeout(REQUEST_TIMEOUT_S, read=None)
        async with self._http.stream("GET", "/v1/events", headers=headers,
                                     timeout=timeout) as answer:  # fmt: skip
            if answer.status_code >= 400:
                await answer.aread()
                raise SourceError(_problem(answer))
            kind = ""
            async for line in answer.aiter_lines():
                if line.startswith(": subscribed"):
                    self.stream_state = "live"
                    self._signal()  # what changed while it was not followed shows now
                elif line.startswith("id:"):
                    self.last_event_id = line[3:].strip()
                    self._signal()
                elif line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:") and kind == "call.output":
                    self._heard(line[5:].strip())
                elif not line:  # a message ends
                    kind = ""

    def _heard(self, data: str) -> None:
        try:
            found = json.loads(data)
        except ValueError:
            log.warning("a call.output message from %s is not JSON; ignored", self.url)
            return
        if isinstance(found, dict):
            self.live.add(found)

    async def aclose(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        await self._http.aclose()


def _problem(answer: httpx.Response) -> str:
    """A problem+json answer as one line: its detail, and what kind it is."""
    try:
        body = answer.json()
        detail, kind = body.get("detail"), str(body.get("type", "")).rsplit(":", 1)[-1]
    except ValueError:
        detail, kind = answer.text[:200], ""
    if answer.status_code == 409 and kind == "token_already_completed":
        return f"already completed by someone else: {detail}"
    return f"{detail} ({answer.status_code}{', ' + kind if kind else ''})"


__all__ = ["ServerSource"]
