"""`stream_call`: one call's live events as an async iterator, ending with its outcome.

    async with stream_call(runner, request) as items:
        async for item in items:
            if isinstance(item, WorkerEvent):
                show(item)          # as the worker emits it
            else:
                outcome = item      # the CallOutcome, always last

It is `Runner.call(request, on_event=...)` run in a task of its own, its events passed
through an unbounded channel (a call delivers at most 10000 of them). Leaving the block
before the end cancels the call: its worker is stopped and removed, as for any
cancelled call.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from envelopes.v1 import ToolCallRequest
from runner.isolation.base import Runner
from runner.isolation.events import WorkerEvent
from runner.isolation.outcome import CallOutcome

StreamItem = WorkerEvent | CallOutcome


@asynccontextmanager
async def stream_call(
    runner: Runner, request: ToolCallRequest
) -> AsyncIterator[AsyncIterator[StreamItem]]:
    """The call's events as they arrive, then its CallOutcome (see the module's doc)."""
    send, receive = anyio.create_memory_object_stream[StreamItem](math.inf)

    def deliver(event: WorkerEvent) -> None:
        # The reader left the block: its call is being cancelled; nobody wants the event.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            send.send_nowait(event)

    async def run(send: MemoryObjectSendStream[StreamItem]) -> None:
        async with send:
            outcome = await runner.call(request, on_event=deliver)
            send.send_nowait(outcome)

    async with anyio.create_task_group() as tasks, receive:
        tasks.start_soon(run, send)
        try:
            yield receive
        finally:
            tasks.cancel_scope.cancel()  # left early: the call is not waited for
