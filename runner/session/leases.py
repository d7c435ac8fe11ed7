"""Holding a lease while advancing a session: acquire (waiting a bounded time for a dead
holder's lease to expire), renew from a thread of its own while the work runs, release.

Every commit made under a lease carries it as a fence (`Holder.fences`): once a newer
holder exists, the store refuses those commits (FencedOut) and nothing changes. A store
that cannot fence (the file store, in single-process use) gives a holder with no fences:
compare-and-set only.

Renewal runs in an OS thread, not on the event loop, so that nothing the process does on
the loop (a long store call, a blocking tool, a sweep) can make a lease lapse; it uses
the store's lease connection, which no other call queues on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

from runner.faults import crash_point
from runner.session.storage import Storage
from runner.state import now_ms
from runner.stores import DurableStore, FencedOut, Lease

logger = logging.getLogger(__name__)

#: After a failed renewal (a locked database, say), try again this soon.
RENEW_RETRY_S = 0.2


class LeaseBusy(Exception):
    """Someone alive holds the lease; the message says who and until when."""

    def __init__(self, name: str, lease: Lease | None) -> None:
        who = f" by {lease.owner}" if lease and lease.owner else ""
        left = f" for up to {max(0, lease.expires_ms - now_ms()) / 1000:.0f}s more" if lease else ""
        super().__init__(f"session {name} is being advanced{who}{left}; try again later")
        self.name = name


@dataclass
class Holder:
    """The lease held (None without a durable store) and whether a newer holder took it."""

    lease: Lease | None
    lost: bool = False

    @property
    def fences(self) -> tuple[Lease, ...]:
        return (self.lease,) if self.lease is not None else ()

    @property
    def takeovers(self) -> int:
        return self.lease.takeovers if self.lease is not None else 0


@asynccontextmanager
async def hold(
    storage: Storage, name: str, owner: str, ttl_s: float, wait_s: float
) -> AsyncIterator[Holder]:
    store = storage.durable
    if store is None:
        yield Holder(None)
        return
    give_up = time.monotonic() + wait_s
    crash_point("lease.acquire")  # where racing claimants meet (crash matrix scenario 6)
    while (lease := await storage.run(store.acquire_lease, name, owner, ttl_s)) is None:
        if time.monotonic() >= give_up:
            raise LeaseBusy(name, await storage.run(store.lease, name))
        await anyio.sleep(min(0.2, ttl_s / 4))
    holder = Holder(lease)
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(store, holder, ttl_s, stop),
                               name=f"lease-renewal {name}", daemon=True)  # fmt: skip
    renewer.start()
    try:
        yield holder
    except BaseExceptionGroup as group:  # one failure inside: re-raise it as itself
        if (only := _only_exception(group)) is not None:
            raise only from None
        raise
    finally:
        stop.set()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(renewer.join)
            if not holder.lost:
                await storage.run(store.release_lease, holder.lease or lease)


def _only_exception(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception in a (possibly nested) group, e.g. FencedOut raised by a call
    running in a task group of the work inside the lease; None when there are several."""
    inner = group.exceptions[0] if len(group.exceptions) == 1 else None
    return _only_exception(inner) if isinstance(inner, BaseExceptionGroup) else inner


def _renew(store: DurableStore, holder: Holder, ttl_s: float, stop: threading.Event) -> None:
    """Renew at a third of the lease, so two renewals can be missed before it lapses."""
    assert holder.lease is not None
    wait = ttl_s / 3
    while not stop.wait(wait):
        try:
            holder.lease = store.renew_lease(holder.lease, ttl_s)
            wait = ttl_s / 3
        except FencedOut as exc:
            holder.lost = True  # a newer holder exists: our commits will be refused
            logger.warning("lost the lease: %s", exc)
            return
        except Exception as exc:  # the store will answer again; the lease has time left
            logger.warning("renewing lease %s failed, retrying: %s", holder.lease.name, exc)
            wait = RENEW_RETRY_S
