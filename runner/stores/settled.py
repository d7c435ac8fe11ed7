"""Which calls of a session a store knows to be stored as terminal: a terminal call
never changes, so a save need not write it again, and a checkpoint costs the same at
any history length. Bounded (least recently used sessions are forgotten) and
thread-safe; SQLiteStore and PostgresStore each keep one."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from runner.state import Session, SessionTail, TrackedCall, Turn

#: Sessions whose settled calls a store remembers.
SETTLED_CACHE_SIZE = 1024


class SettledCalls:
    def __init__(self, size: int = SETTLED_CACHE_SIZE) -> None:
        self._known: OrderedDict[str, set[str]] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def remember(self, session_id: str, settled: Iterable[str]) -> None:
        """Note calls now known to be stored as terminal (after a read or a commit)."""
        with self._lock:
            known = self._known.setdefault(session_id, set())
            known.update(settled)
            self._known.move_to_end(session_id)
            while len(self._known) > self._size:
                self._known.popitem(last=False)

    def unsettled(self, session: SessionTail) -> list[TrackedCall]:
        """The session's calls not known to be stored as terminal: what a save writes."""
        with self._lock:
            known = self._known.get(session.id, set())
            return [c for c in session.calls.values() if c.id not in known]


def terminal_ids(calls: Iterable[TrackedCall]) -> set[str]:
    return {c.id for c in calls if c.terminal}


def with_earlier(
    tail: SessionTail, earlier: list[Turn], settled: dict[str, TrackedCall]
) -> Session:
    """`tail` with the turns before it and the calls that ended before them prepended:
    the whole session, calls in turn order."""
    calls = {**{k: c for k, c in settled.items() if k not in tail.calls}, **tail.calls}
    ordered = dict(sorted(calls.items(), key=lambda item: item[1].turn))
    return Session.joined(tail, [*earlier, *tail.turns], ordered)
