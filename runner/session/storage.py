"""The engine's side of a store: what it needs, checked once, and calls that never block
the event loop.

Store methods are synchronous (sqlite3, files). `Storage.run` calls one in a worker
thread, at most one at a time per Storage (a CapacityLimiter), so a slow disk or a busy
database stalls only the session that waits for it, never the loop that renews leases
and runs other sessions. Lease renewal has its own thread (leases.py).

What a store can do is its type: `require_durable` refuses a store that cannot fence,
naming what it lacks, wherever sessions may be advanced by more than one process.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import anyio
import anyio.to_thread

from runner.stores import DurableStore, SessionStore

logger = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

#: What a store lacks when it is not a DurableStore, for the refusal's message.
DURABLE_CAPABILITIES = "leases with fencing tokens and an effect ledger"


class StoreCapabilityError(Exception):
    """The store given cannot provide a guarantee this use needs; the message says which."""


def require_durable(store: SessionStore, purpose: str) -> DurableStore:
    if not isinstance(store, DurableStore):
        raise StoreCapabilityError(
            f"{purpose} needs a store with {DURABLE_CAPABILITIES}; the"
            f" {store.description} ({type(store).__name__}) has neither, so two processes"
            " could both advance one session and repeat external effects. Use an SQLite"
            " store (or a CompositeStore whose primary is one)"
        )
    return store


class Storage:
    """One store as the engine uses it: `await storage.run(store.save, session)`."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self.durable: DurableStore | None = store if isinstance(store, DurableStore) else None
        self._limiter = anyio.CapacityLimiter(1)

    async def run(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Call a store method in a worker thread; its exceptions come back as they are."""
        call = functools.partial(function, *args, **kwargs)
        return await anyio.to_thread.run_sync(call, limiter=self._limiter)


class StoreCalls:
    """Counts the calls made on `store`'s public methods from now on, by method name:
    its round trips, as the bench's rows and the tests measure them. The store stays
    itself (what isinstance says of it is unchanged); `stop` takes the counting off."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()  # the lease renewer counts from its own thread
        kind = type(store)
        self._names = [name for name in dir(kind) if not name.startswith("_")
                       and callable(getattr(kind, name, None))]  # fmt: skip
        for name in self._names:
            setattr(store, name, self._counted(name, getattr(store, name)))

    def _counted(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.counts[name] += 1
            return method(*args, **kwargs)

        return counted

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()

    def stop(self) -> None:
        for name in self._names:
            self.store.__dict__.pop(name, None)
