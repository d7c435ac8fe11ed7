"""Holding a lease while advancing something: acquire (waiting a bounded time for a
dead holder's lease to expire), renew in the background while the work runs, release.

Every commit made under a lease carries it as a fence (`Holder.fences`): once a newer
holder exists, the store refuses those commits (FencedOut) and nothing changes. A store
without leases (the file store) gives a holder with no fences: compare-and-set only.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from runner.session.faults import crash_point
from runner.session.models import now_ms
from runner.stores.base import FencedOut, Lease


class LeaseBusy(Exception):
    """Someone alive holds the lease; the message says who and until when."""

    def __init__(self, name: str, lease: Lease | None) -> None:
        who = f" by {lease.owner}" if lease and lease.owner else ""
        left = f" for up to {max(0, lease.expires_ms - now_ms()) / 1000:.0f}s more" if lease else ""
        super().__init__(f"session {name} is being advanced{who}{left}; try again later")
        self.name = name


@dataclass
class Holder:
    lease: Lease | None
    lost: bool = False

    @property
    def fences(self) -> tuple[Lease, ...]:
        return (self.lease,) if self.lease is not None else ()


def supports_leases(store: Any) -> bool:
    return callable(getattr(store, "acquire_lease", None))


@asynccontextmanager
async def hold(
    store: Any, name: str, owner: str, ttl_s: float, wait_s: float
) -> AsyncIterator[Holder]:
    if not supports_leases(store):
        yield Holder(None)
        return
    give_up = time.monotonic() + wait_s
    crash_point("lease.acquire")  # where racing claimants meet (crash matrix scenario 6)
    while (lease := store.acquire_lease(name, owner, ttl_s)) is None:
        if time.monotonic() >= give_up:
            raise LeaseBusy(name, store.lease(name))
        await anyio.sleep(min(0.2, ttl_s / 4))
    holder = Holder(lease)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_renew, store, holder, ttl_s)
            try:
                yield holder
            finally:
                group.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # one failure inside: re-raise it as itself
        if (only := _only_exception(group)) is not None:
            raise only from None
        raise
    finally:
        if not holder.lost:
            store.release_lease(holder.lease)


def _only_exception(group: BaseExceptionGroup) -> BaseException | None:
    """The one exception in a (possibly nested) group, e.g. FencedOut raised by a call
    running in a task group of the work inside the lease; None when there are several."""
    inner = group.exceptions[0] if len(group.exceptions) == 1 else None
    return _only_exception(inner) if isinstance(inner, BaseExceptionGroup) else inner


async def _renew(store: Any, holder: Holder, ttl_s: float) -> None:
    """Renew at a third of the lease, so two renewals can be missed before it lapses."""
    while True:
        await anyio.sleep(ttl_s / 3)
        try:
            assert holder.lease is not None
            holder.lease = store.renew_lease(holder.lease, ttl_s)
        except FencedOut:
            holder.lost = True  # a newer holder exists: our commits will be refused
            return
