"""Live events as Server-Sent Events: `GET /v1/sessions/{id}/events` and `GET /v1/events`.

Each message is `id: <seq>`, `event: <kind>`, `data: <json>` for one row of the store's
event log (runner.state.events lists the kinds; docs/events.md the fields). A client
resumes after a disconnect with `Last-Event-ID` (or `?after=N`) and gets exactly what
it missed. Without either, a session's stream starts at the session's first event and
`/v1/events` at the newest; a comment opens each stream once it is subscribed, and
FastAPI's keep-alive comment follows every 15 s of silence.

Who sees what: an operator or viewer every event; a claimer only `call.*` events of the
tools it is granted.

Fan-out: one EventHub per app (this router's lifespan runs it). Its tailer follows the
log, reading in a thread and waiting on `store.wait_for_events` between reads (a store
that announces writes signals it at once, others are polled), and hands each new event to
every subscriber's bounded queue. A subscriber whose queue fills (a slow client) is
marked behind and catches up from the store after its last seq, so it is late but never
loses an event; each stream reads the store itself only to catch up.

uvicorn does not tell an app it is stopping while a response streams, so whoever stops
the server calls `close_streams(app)` first (the lifespan's end is too late: uvicorn
runs it after the streams are gone).

Live output (`call.output`): what a running call's worker streams, heard from this
process's CallOutputBus (runner.session.output: the calls `serve`'s own worker loop and
its resumes run), is offered to the subscribers beside the log's events, as an Event
whose seq is LIVE_SEQ. It is not in the log: such a message has no `id` (a client's
Last-Event-ID stays the last logged event's), a stream catching up from the store never
replays it, and a subscriber that is behind misses it. docs/events.md says why.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent

from runner.server.auth import Grant
from runner.server.problems import Problem, responses
from runner.server.routes import Caller, Config, call, require
from runner.server.visibility import View, view_of
from runner.session.output import CallOutputBus, LiveOutput
from runner.stores import DurableStore, Event, StoreError

log = logging.getLogger(__name__)

#: Longest the tailer waits between reads of the log (a store that announces writes
#: signals it sooner; this bounds how late another process's events are seen).
POLL_S = 0.5
#: Events read per query, by the tailer and by a stream catching up.
PAGE = 500
#: Events a subscriber may have queued before it is behind (and catches up from the store).
QUEUE_SIZE = 1000
#: Pause after a failed read of the log before the tailer tries again.
RETRY_S = 1.0

Wants = Callable[[Event], bool]
#: The seq of a live event (never a row of the log, whose seqs start at 1).
LIVE_SEQ = 0
#: The kind of a running call's live output.
CALL_OUTPUT_KIND = "call.output"


def live_event(item: LiveOutput) -> Event:
    """A running call's event as the hub hands it out (not a row of the log)."""
    return Event(LIVE_SEQ, item.session_id, CALL_OUTPUT_KIND, item.call_id, item.to_json(),
                 item.event.at_ms)  # fmt: skip


class Subscriber:
    """One stream's queue of the events it wants, filled by the hub's tailer."""

    def __init__(self, wants: Wants) -> None:
        self.wants = wants
        self.queue: deque[Event] = deque()
        #: The queue overflowed and was dropped: catch up from the store.
        self.behind = True  # a new stream starts by catching up
        self._signal = anyio.Event()

    def offer(self, events: list[Event]) -> None:
        if self.behind:
            return
        for event in events:
            if not self.wants(event):
                continue
            if len(self.queue) >= QUEUE_SIZE:  # too slow: drop them, catch up from the store
                self.queue.clear()
                self.behind = True
                self.signal()
                return
            self.queue.append(event)
            self.signal()

    def signal(self) -> None:
        self._signal.set()

    async def wait(self) -> None:
        """Until there is something to do (or the hub closes)."""
        if not self.queue and not self.behind:
            self._signal = anyio.Event()
            await self._signal.wait()


class EventHub:
    """The app's one follower of the store's event log, and its subscribers."""

    def __init__(self, store: DurableStore, poll_s: float = POLL_S) -> None:
        self.store, self.poll_s = store, poll_s
        #: The newest seq the tailer has read (and handed to subscribers).
        self.last_seq = 0
        self.closed = False
        self.started = anyio.Event()
        self._subscribers: set[Subscriber] = set()
        #: The event loop the hub runs in (set by `run`), for `close_streams`.
        self.loop: anyio.lowlevel.EventLoopToken | None = None

    async def run(self) -> None:
        """The tailer, until cancelled. A failed read is logged and tried again: the
        streams wait meanwhile, and lose nothing (they resume from `last_seq`)."""
        self.loop = anyio.lowlevel.current_token()
        while True:
            try:
                await self._follow()
            except StoreError as exc:
                log.warning("events: reading the event log failed: %s; retrying", exc)
            except Exception:  # a bug must not end the app's streams for good
                log.exception("events: the tailer failed; retrying")
            await anyio.sleep(RETRY_S)

    async def _follow(self) -> None:
        if not self.started.is_set():
            self.last_seq = await anyio.to_thread.run_sync(self.store.last_event_seq)
            self.started.set()
        while True:
            events = await anyio.to_thread.run_sync(self.store.events, self.last_seq, PAGE)
            if events:
                self.last_seq = events[-1].seq
                for subscriber in list(self._subscribers):
                    subscriber.offer(events)
                if len(events) == PAGE:
                    continue
            await anyio.to_thread.run_sync(self.store.wait_for_events, self.poll_s)

    def subscribe(self, wants: Wants) -> Subscriber:
        """A new subscriber; it is offered every event after `last_seq` from now on."""
        subscriber = Subscriber(wants)
        self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)

    def offer_live(self, item: LiveOutput) -> None:
        """A running call's output, for the subscribers following now (on the hub's loop)."""
        if self.closed:
            return
        event = [live_event(item)]
        for subscriber in list(self._subscribers):
            subscriber.offer(event)

    def close(self) -> None:
        """End every stream (at its next step) and refuse new ones."""
        self.closed = True
        for subscriber in list(self._subscribers):
            subscriber.signal()


def close_streams(app: FastAPI) -> None:
    """End the app's event streams, so that uvicorn can stop: call it before stopping
    the server, from the server's event loop or from any other thread."""
    hub: EventHub | None = getattr(app.state, "events", None)
    if hub is None:
        return
    try:
        here: anyio.lowlevel.EventLoopToken | None = anyio.lowlevel.current_token()
    except anyio.NoEventLoopError:
        here = None
    if hub.loop is None or here == hub.loop:
        hub.close()
    else:
        anyio.from_thread.run_sync(hub.close, token=hub.loop)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    hub = EventHub(app.state.settings.store)
    app.state.events = hub
    # The app's engine's bus: `serve`'s worker loop runs calls through that engine too.
    bus: CallOutputBus = app.state.settings.engine.call_output
    unsubscribe = bus.subscribe(hub.offer_live)  # here: called on this loop
    async with anyio.create_task_group() as group:
        group.start_soon(hub.run)
        try:
            yield
        finally:
            unsubscribe()
            hub.close()
            group.cancel_scope.cancel()


router = APIRouter(lifespan=lifespan)


def visible_to(who: Grant | None) -> Wants:
    """Operators and viewers see every event, a claimer its tools' call events (the
    caller's View decides: runner.server.visibility)."""
    return view_of(who).sees_event


def hub_of(request: Request) -> EventHub:
    hub: EventHub | None = getattr(request.app.state, "events", None)
    if hub is None or hub.closed:
        raise Problem(503, "events_unavailable", "the event stream is not running"
                      " (the server is stopping, or was started without its lifespan)")  # fmt: skip
    return hub


def resume_point(
    last_event_id: Annotated[
        int | None,
        Header(ge=0, description="resume after this event (what EventSource sends back)"),
    ] = None,
    after: Annotated[
        int | None, Query(ge=0, description="resume after this event (Last-Event-ID wins)")
    ] = None,
) -> int | None:
    return last_event_id if last_event_id is not None else after


def watcher(who: Caller) -> Grant | None:
    require(who, "operator", "viewer", "claimer")
    return who


Hub = Annotated[EventHub, Depends(hub_of)]
After = Annotated[int | None, Depends(resume_point)]
Watcher = Annotated[Grant | None, Depends(watcher)]


async def known_session(session_id: str, config: Config, who: Watcher) -> str:
    """404 for an unknown session, before the stream starts."""
    await call(lambda: config.store.load(session_id, history=False))
    return session_id


KnownSession = Annotated[str, Depends(known_session)]


def message(event: Event, view: View) -> ServerSentEvent | None:
    """The event as the caller's View shows it (None: not to this caller)."""
    text = view.event_text(event)
    if text is None:
        return None
    if event.seq == LIVE_SEQ:  # not in the log: no id, so Last-Event-ID is left as it was
        return ServerSentEvent(raw_data=text, event=event.kind)
    return ServerSentEvent(raw_data=text, event=event.kind, id=str(event.seq))


async def stream(
    hub: EventHub, after: int | None, wants: Wants, view: View, session_id: str | None = None
) -> AsyncIterator[ServerSentEvent]:
    """The events after seq `after` (None: the newest the hub has read) that `wants`
    takes, then each new one as it comes, until the hub closes or the client goes."""
    await hub.started.wait()
    cursor = hub.last_seq if after is None else after  # all up to here sent or passed over
    subscriber = hub.subscribe(wants)  # no await since reading last_seq: nothing between
    try:
        yield ServerSentEvent(comment=f"subscribed after {cursor}")
        while not hub.closed:
            if subscriber.behind:
                # Everything up to the tailer's newest read is in the store; what comes
                # after it is offered to the queue from now on.
                target, subscriber.behind = hub.last_seq, False
                while cursor < target:
                    try:
                        page = await anyio.to_thread.run_sync(
                            hub.store.events, cursor, PAGE, session_id
                        )
                    except StoreError as exc:  # the client resumes with Last-Event-ID
                        log.warning("events: a stream ends: reading the log failed: %s", exc)
                        return
                    for event in page:
                        if wants(event) and (sent := message(event, view)) is not None:
                            yield sent
                        cursor = event.seq
                    if len(page) < PAGE:
                        cursor = max(cursor, target)
            elif subscriber.queue:
                event = subscriber.queue.popleft()
                sent = message(event, view)
                if event.seq == LIVE_SEQ:
                    if sent is not None:
                        yield sent
                elif event.seq > cursor:
                    if sent is not None:
                        yield sent
                    cursor = event.seq
            else:
                await subscriber.wait()
    finally:
        hub.unsubscribe(subscriber)


def stream_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """A stream route's `responses=`: the 200 answer's description (FastAPI documents its
    text/event-stream items), then the problems of `statuses` (a new dict each time:
    FastAPI keeps what it is given)."""
    stream: dict[int | str, dict[str, Any]] = {
        200: {
            "description": "Server-Sent Events: `id: <seq>`, `event: <kind>`, `data: <JSON>`;"
            " a running call's live `call.output` has no `id` (it is not in the log)"
        }
    }
    return {**stream, **responses(*statuses)}


@router.get("/v1/sessions/{session_id}/events", response_class=EventSourceResponse,
            responses=stream_responses(404))  # fmt: skip
async def session_events(
    session: KnownSession, who: Watcher, hub: Hub, after: After
) -> AsyncIterator[ServerSentEvent]:
    """One session's events as Server-Sent Events, from its first (or after
    `Last-Event-ID` / `after`). A claimer sees only its tools' call events."""
    visible = visible_to(who)
    wants: Wants = lambda event: event.session_id == session and visible(event)  # noqa: E731
    async for item in stream(hub, after or 0, wants, view_of(who), session):
        yield item


@router.get("/v1/events", response_class=EventSourceResponse, responses=stream_responses())
async def all_events(who: Watcher, hub: Hub, after: After) -> AsyncIterator[ServerSentEvent]:
    """Every session's events the caller may see as Server-Sent Events, from now (or
    after `Last-Event-ID` / `after`). A claimer sees only its tools' call events."""
    async for item in stream(hub, after, visible_to(who), view_of(who)):
        yield item
