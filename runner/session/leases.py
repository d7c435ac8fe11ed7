"""Holding a lease while advancing a session: acquire (waiting a bounded time for a dead
holder's lease to expire), renew from a thread of its own while the work runs, release.

The store takes the lease and loads the session in one call (`lease_and_load`, what
`take` is given), and the operation's last commit may release the lease with it
(`Runtime.commit(..., release=True)`: `save_and_release`, after `Holder.finishing` has
stopped the renewals); the lease is released at the end only if that did not.

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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio

from runner.faults import crash_point
from runner.session.storage import Storage
from runner.state import SessionTail, now_ms
from runner.stores import DurableStore, FencedOut, Lease, LeasedSession

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
    """The lease held (None without a durable store), whether a newer holder took it, and
    whether the operation's last commit released it."""

    lease: Lease | None
    lost: bool = False
    released: bool = False
    _stop_renewing: Callable[[], Awaitable[None]] | None = field(default=None, repr=False)

    @property
    def fences(self) -> tuple[Lease, ...]:
        return (self.lease,) if self.lease is not None else ()

    @property
    def takeovers(self) -> int:
        return self.lease.takeovers if self.lease is not None else 0

    async def finishing(self) -> None:
        """Stop renewing: the next commit is the operation's last and releases the lease
        (a renewal after the release would extend a lease nobody holds)."""
        if self._stop_renewing is not None:
            await self._stop_renewing()


#: One attempt at the lease and the load (DurableStore.lease_and_load, by id or token):
#: the session loaded under it, or the id of the session whose lease a live holder has.
Take = Callable[[], Awaitable[LeasedSession | str]]


@asynccontextmanager
async def hold(storage: Storage, ttl_s: float, wait_s: float, take: Take) -> AsyncIterator[
    tuple[SessionTail, Holder]
]:  # fmt: skip
    """Take the lease and load the session (`take`, again every so often for up to
    `wait_s` while a live holder has it: LeaseBusy then), renew it while the caller
    works, release it unless the last commit did."""
    store = storage.durable
    assert store is not None, "a lease needs a durable store"
    give_up = time.monotonic() + wait_s
    crash_point("lease.acquire")  # where racing claimants meet (crash matrix scenario 6)
    while isinstance(taken := await take(), str):
        if time.monotonic() >= give_up:
            raise LeaseBusy(taken, await storage.run(store.lease, taken))
        await anyio.sleep(min(0.2, ttl_s / 4))
    lease = taken.lease
    stop = threading.Event()
    holder = Holder(lease)
    renewer = threading.Thread(target=_renew, args=(store, holder, ttl_s, stop),
                               name=f"lease-renewal {lease.name}", daemon=True)  # fmt: skip

    async def stop_renewing() -> None:
        stop.set()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(renewer.join)

    holder._stop_renewing = stop_renewing
    renewer.start()
    try:
        yield taken.session, holder
    except BaseExceptionGroup as group:  # one failure inside: re-raise it as itself
        if (only := _only_exception(group)) is not None:
            raise only from None
        raise
    finally:
        await stop_renewing()
        if not holder.lost and not holder.released:
            with anyio.CancelScope(shield=True):
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
