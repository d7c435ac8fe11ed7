"""The store interfaces, as types: what a backend can do is the class it derives from.

A store is made of small parts, each an interface here:

- SessionStore: sessions with compare-and-set, agent definitions, the continuation index.
  Every write that advances a session is a compare-and-set on its version: `save`
  succeeds only if the stored version is still `session.version` and returns the session
  with the new version; otherwise it raises VersionConflict and changes nothing. Alone,
  it is a store for one process (files.py).
- FencedSessions: the same, whose `save(session, fences)` refuses a stale lease holder
  with FencedOut (zero rows changed).
- Leases (leases whose fencing tokens guard every advancing write, and due work), EventLog
  (every write that changes a call's state or a session's status appends its events,
  runner.state.events, in the same transaction, numbered in commit order, which the
  server streams), EffectLedger (every isolated call recorded before and after it runs;
  late results), CallClaims (deferred calls leased to claimers under tokens
  that fence, ClaimLost), ToolCache, AuditLog.
- LeasedSessions: a session's lease taken with its load (by id or continuation token),
  and its last save with the lease's release, each one round trip where a backend's
  sessions and leases share a transaction (sql/leased.py); DurableStore's defaults make
  each the plain calls, with the same outcomes.
- DurableStore: all of them but the audit log, the store several processes can share.

Backends: sqlite/ (durable, the embedded default), postgres/ (durable, shared by workers
on many hosts), files.py (sessions as JSON files; single process), composite.py (reads
fall through; as durable as its primary). composed.py assembles a DurableStore from
parts; sql/ holds the parts and the SQL the two database engines share.
"""

from __future__ import annotations

import hashlib
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Self, overload

from runner.isolation.audit import AuditQuery, AuditRecord
from runner.state import Session, SessionT, SessionTail, ToolResult, TrackedCall
from runner.state.effects import Effects


class StoreError(Exception):
    """The store cannot do what was asked; the message says why."""


class StoreUnavailable(StoreError):
    """The store's server did not answer (not running yet, restarting, unreachable): a
    long-running process may wait and try again; anything else about the store is not
    worth retrying."""


class SessionNotFound(StoreError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r} in this store")
        self.session_id = session_id


class VersionConflict(StoreError):
    """A write based on a stale read: someone else advanced the session first."""

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"session {session_id} changed underneath this write (read version {expected},"
            f" stored version {actual}); load it again and retry"
        )
        self.session_id = session_id
        self.expected = expected
        self.actual = actual


class FencedOut(StoreError):
    """A commit carrying a fencing token that a newer lease holder has superseded."""

    def __init__(self, name: str, token: int, newest: int | None) -> None:
        super().__init__(
            f"lease {name!r}: fencing token {token} is stale (newest {newest}); another"
            " holder took over, this commit changed nothing"
        )
        self.name, self.token, self.newest = name, token, newest


@dataclass(frozen=True)
class Lease:
    """The right to advance one thing (a session) until `expires_ms` (database time).
    `fencing_token` only grows; `takeovers` counts holders that died in a row."""

    name: str
    owner: str
    fencing_token: int
    expires_ms: int
    takeovers: int = 0


EffectState = Literal["requested", "started", "completed", "abandoned"]


@dataclass(frozen=True)
class Effect:
    """An effect-ledger row: one isolated call's latest attempt and what became of it.
    state: requested (before the worker starts), started (handed to the runner),
    completed (`result` is the ToolCallResult envelope), abandoned (an operator said so)."""

    idempotency_key: str
    session_id: str
    call_id: str
    attempt: int
    effects: Effects
    state: EffectState
    result: str | None


@dataclass(frozen=True)
class SessionSummary:
    id: str
    status: str
    agent_slug: str
    version: int
    updated_ms: int


@dataclass(frozen=True)
class Event:
    """A row of the event log: one change of a call's state or a session's status
    (runner.state.events lists the kinds and their `data`). `seq` is commit order."""

    seq: int
    session_id: str
    kind: str
    call_id: str | None
    data: dict[str, Any]
    at_ms: int


@dataclass(frozen=True)
class Continuation:
    """Where a continuation token leads."""

    token: str
    session_id: str
    call_id: str


ClaimState = Literal["held", "released", "lapsed", "done"]


@dataclass(frozen=True)
class Claim:
    """A deferred call handed to a claimer until `expires_ms` (store time).

    `token` fences: a re-claim writes a new one, so an old holder's matches nothing.
    state: held; released (it lapsed and the call is claimable again); lapsed (it lapsed
    and, its tool's effects being external, the call went to unknown_outcome); done (its
    result was given). `continuation` is the call's continuation token; `lease_ms` the
    lease a heartbeat renews by default; `call` the call as claimed (claim_calls only)."""

    token: str
    session_id: str
    call_id: str
    tool: str
    claimer: str
    state: ClaimState
    expires_ms: int
    lease_ms: int
    continuation: str
    call: TrackedCall | None = None


class ClaimLost(StoreError):
    """A claim token that no longer holds its call. `state` is the claim's (lapsed: the
    call went to unknown_outcome; done: its result was given), or None when no claim has
    this token (another claimer re-claimed the call, or it was never issued)."""

    def __init__(self, token: str, state: ClaimState | None = None) -> None:
        why = {
            None: "no claim has this token: the call was claimed again by another claimer"
            " (or the token was never issued)",
            "lapsed": "its lease lapsed and the call went to unknown_outcome (its tool has"
            " external effects)",
            "done": "its result was already given",
            "released": "its lease lapsed and the call is claimable again",
            "held": "it is held",
        }[state]
        super().__init__(f"claim {token}: {why}")
        self.token, self.state = token, state


class SessionStore(ABC):
    """Sessions with compare-and-set, the agent definitions they run, the continuation
    index. Enough for one process advancing its own sessions (`single_process`).

    Methods are synchronous and safe to call from any thread; the engine calls them in
    worker threads (runner.session.storage), never on the event loop.
    """

    #: What a message about this store calls it ("SQLite store s.db").
    description: str = "store"

    @abstractmethod
    def create(self, session: Session, agent_document: dict[str, Any]) -> Session:
        """Store a new session and the agent definition it runs. A new session gets
        version 1; one copied from another store keeps its version."""

    @overload
    def load(self, session_id: str, *, history: Literal[True] = True) -> Session: ...

    @overload
    def load(self, session_id: str, *, history: bool) -> SessionTail: ...

    @abstractmethod
    def load(self, session_id: str, *, history: bool = True) -> SessionTail:
        """The session as stored, whole. `history=False`: only its tail, what can still
        change (see SessionTail); a store that keeps whole documents returns them whole,
        and every store returns a tail that holds everything as a Session."""

    @abstractmethod
    def with_history(self, tail: SessionTail) -> Session:
        """The whole session of which `tail` is the end: with the turns and calls a
        `history=False` load left out (a copy; `tail` itself when it is a Session)."""

    @abstractmethod
    def save(self, session: SessionT) -> SessionT:
        """Compare-and-set on `session.version`: returns the session as stored (a copy
        of what was given, a tail or a whole session, with the new version);
        VersionConflict and nothing written when it is stale."""

    @abstractmethod
    def put_agent(self, agent_hash: str, agent_document: dict[str, Any]) -> None: ...

    @abstractmethod
    def agent_document(self, agent_hash: str) -> dict[str, Any]: ...

    @abstractmethod
    def list(self, status: str | None = None) -> list[SessionSummary]: ...

    @abstractmethod
    def find(self, token: str) -> Continuation | None:
        """Where a continuation token leads, if anywhere."""

    def close(self) -> None:  # noqa: B027  nothing to release unless a backend holds it
        """Release what the store holds open (connections, files)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FencedSessions(SessionStore):
    """The sessions part of a durable store: `save` also takes the fences that guard it."""

    @abstractmethod
    def save(self, session: SessionT, fences: tuple[Lease, ...] = ()) -> SessionT:
        """Compare-and-set as in SessionStore, and FencedOut (zero rows changed) when
        any fence's token is no longer the newest for its lease."""


class Leases(ABC):
    """Leases and due work: who may advance a session now (names are session ids), and
    which sessions are due. `due_sessions` offers sessions; it hands nothing over: a
    worker still takes each one's lease."""

    @abstractmethod
    def acquire_lease(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        """A new lease with a newer token, or None while a live holder has it."""

    @abstractmethod
    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        """Extend a lease still held; FencedOut when someone took it over. Never waits
        behind the store's other calls (a lease that cannot be renewed lapses)."""

    @abstractmethod
    def release_lease(self, lease: Lease) -> None: ...

    @abstractmethod
    def lease(self, name: str) -> Lease | None:
        """The lease as stored (owner '' once released), or None if never taken."""

    @abstractmethod
    def now_ms(self) -> int:
        """The store's time, which leases are measured in."""

    @abstractmethod
    def due_sessions(self, limit: int, exclude: Collection[str] = ()) -> list[str]:
        """Sessions a worker can advance now: due, and not leased by a live holder."""

    def wait_for_due(self, timeout_s: float) -> bool:
        """Block until a session may have become due (True) or `timeout_s` passed (False).
        A store that can announce it (PostgreSQL's LISTEN/NOTIFY) returns early; this
        default just sleeps, so a worker polls `due_sessions` every `timeout_s`."""
        time.sleep(timeout_s)
        return False


@dataclass(frozen=True)
class LeasedSession:
    """A session loaded (its recent part, as `load(history=False)`) under the lease just
    taken on it."""

    lease: Lease
    session: SessionTail


class LeasedSessions(ABC):
    """What advancing a session begins and ends with, each as one store call: take its
    lease and load it, save it and let the lease go. The fencing and compare-and-set
    are exactly the plain calls': a fast path only saves round trips."""

    @abstractmethod
    def lease_and_load(self, session_id: str, owner: str, ttl_s: float) -> LeasedSession | None:
        """`acquire_lease(session_id, owner, ttl_s)`, then `load(session_id,
        history=False)` under it. None while a live holder has the lease (nothing
        loaded); SessionNotFound, and no lease taken, when there is no such session."""

    @abstractmethod
    def lease_and_load_token(
        self, token: str, owner: str, ttl_s: float
    ) -> LeasedSession | Continuation | None:
        """`lease_and_load` of the session a continuation token leads to (`find`): None
        when no call has `token` (nothing taken); the token's Continuation while a live
        holder has its session's lease."""

    @abstractmethod
    def save_and_release(self, session: SessionT, lease: Lease) -> SessionT:
        """`save(session, (lease,))`, then `release_lease(lease)`, as one: on
        VersionConflict, FencedOut or SessionNotFound nothing is written and the lease
        is as it was (still held, unless a newer holder took it)."""


class EventLog(ABC):
    """The event log. `create` and `save` append their events (runner.state.events) in
    the transaction that writes the session, numbered in commit order: a reader that has
    seen seq N has seen every smaller one, so resuming after N never misses one."""

    @abstractmethod
    def events(self, after: int, limit: int = 500, session_id: str | None = None) -> list[Event]:
        """Up to `limit` events with seq > `after` (of one session, if given), ascending."""

    @abstractmethod
    def last_event_seq(self) -> int:
        """The newest event's seq (0 for an empty log): where a reader from now starts."""

    def wait_for_events(self, timeout_s: float) -> bool:
        """Block until events may have been written (True) or `timeout_s` passed (False);
        a reader then calls `events` again. This default just sleeps (a reader polls);
        a store that can announce writes returns early."""
        time.sleep(timeout_s)
        return False


class EffectLedger(ABC):
    """The effect ledger (one row per isolated call's latest attempt) and late results."""

    @abstractmethod
    def effect(self, idempotency_key: str) -> Effect | None: ...

    @abstractmethod
    def record_effect(self, effect: Effect, fences: tuple[Lease, ...] = ()) -> None:
        """Upsert the row; refused (FencedOut, nothing written) under a stale fence."""

    @abstractmethod
    def record_late(self, token: str, session_id: str, call_id: str, result: ToolResult) -> None:
        """Keep a result that came after its call ended (it never revives the call)."""

    @abstractmethod
    def late_results(self, session_id: str) -> list[tuple[str, ToolResult]]: ...


class CallClaims(ABC):
    """Deferred-call claims: deferred calls handed to claimers under a lease of
    their own (runner.session.claims sweeps the lapsed ones; runner.server.claims is the
    HTTP side). All in store time. Not to be confused with a due-session offer
    (Leases.due_sessions), which hands a worker nothing but a hint."""

    @abstractmethod
    def claim_calls(
        self, tools: Collection[str], claimer: str, lease_s: float, limit: int
    ) -> list[Claim]:
        """Hand up to `limit` claimable calls of `tools` to `claimer` until now +
        `lease_s`, each with a fresh token and `call` filled. Claimable: deferred, not
        past its expiry, its session running or waiting, and no claim row or a released
        one. Concurrent claimers never get one call twice (nor wait for each other)."""

    @abstractmethod
    def claim(self, token: str) -> Claim | None:
        """The claim with this token, in whatever state, or None."""

    @abstractmethod
    def renew_claim(self, token: str, lease_s: float | None = None) -> Claim:
        """Extend a held claim, or a released one nobody re-claimed (held again), to now
        + `lease_s` (default: its lease). ClaimLost: re-claimed (state None), lapsed or
        done; nothing changes then."""

    @abstractmethod
    def finish_claim(self, token: str) -> Claim:
        """Mark the claim done whatever its state (its holder is giving the result);
        ClaimLost and nothing changed when no claim has this token."""

    @abstractmethod
    def lapsed_claims(self, limit: int) -> list[Claim]:
        """What a sweep must decide: held claims past their expiry, and lapsed claims
        whose call is still deferred (a sweep stopped before moving it)."""

    @abstractmethod
    def settle_lapsed(self, token: str, state: Literal["released", "lapsed"]) -> bool:
        """A held claim past its expiry to `state`; True if it is in `state` now (also
        when it already was), False when it was renewed or finished meanwhile."""

    @abstractmethod
    def reopen_claims(self, session_id: str, call_id: str) -> None:
        """Make a call whose claim lapsed (`lapsed`) claimable again (`released`): an
        operator forced a new attempt, so the call is deferred again (`session retry
        --force`). Nothing changes for a call without a lapsed claim."""


class ToolCache(Protocol):
    """The tool cache: what the `cache` decorator needs (a DurableStore is one)."""

    @abstractmethod
    def get(self, tool: str, arguments: dict[str, Any]) -> ToolResult | None: ...

    @abstractmethod
    def put(
        self, tool: str, arguments: dict[str, Any], result: ToolResult, ttl_s: float | None
    ) -> None: ...


class AuditLog(ABC):
    """The audit log: somewhere records of isolated calls are appended and listed
    (runner.stores.audit finds a store's)."""

    description: str = "audit log"

    @abstractmethod
    def append_audit(self, record: AuditRecord) -> None:
        """Append one record, durably; never changes one already there."""

    @abstractmethod
    def audit_records(self, query: AuditQuery) -> list[AuditRecord]:
        """The records `query` asks for, oldest first (the newest `query.limit`)."""


class DurableStore(
    FencedSessions, Leases, LeasedSessions, EventLog, EffectLedger, CallClaims, ToolCache
):
    """A store several processes can share: its sessions, leases and due work, the event
    log, the effect ledger, deferred-call claims and the tool cache, in one clock (each
    part above states its share of the contract). runner.stores.composed.ComposedStore
    builds one from part objects; every backend is one.

    The engine refuses to advance sessions concurrently (a worker, `resume` from more
    than one process) on anything less; see runner.session.storage.require_durable.

    LeasedSessions' methods default to the plain calls they are made of (a backend
    whose sessions and leases are one database gives them one round trip each).
    """

    def lease_and_load(self, session_id: str, owner: str, ttl_s: float) -> LeasedSession | None:
        self.load(session_id, history=False)  # SessionNotFound before any lease
        lease = self.acquire_lease(session_id, owner, ttl_s)
        if lease is None:
            return None
        return LeasedSession(lease, self.load(session_id, history=False))

    def lease_and_load_token(
        self, token: str, owner: str, ttl_s: float
    ) -> LeasedSession | Continuation | None:
        found = self.find(token)
        if found is None:
            return None
        return self.lease_and_load(found.session_id, owner, ttl_s) or found

    def save_and_release(self, session: SessionT, lease: Lease) -> SessionT:
        stored = self.save(session, (lease,))
        self.release_lease(lease)
        return stored


def cache_key(tool: str, arguments: dict[str, Any]) -> str:
    """Tool name plus a hash of the canonical arguments (sorted keys, compact, UTF-8)."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{tool}:{hashlib.sha256(canonical.encode()).hexdigest()}"
