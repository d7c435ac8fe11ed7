"""The gate every advancing operation passes: hold the session's lease, then bring the
session up to date before anything else touches it.

Inside the lease, in order: quarantine a session whose holders keep dying (the lease
counts takeovers in a row); after any takeover, sweep what the dead holder left running
(in a thread: it scans /proc and asks the Docker engine); refuse an older session schema
or a changed agent definition unless told to migrate or allow it; expire deferred calls
whose time is up. Then the caller gets the session (only its tail, what can still change:
runner.state.SessionTail) and the holder whose fence every commit carries.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio.to_thread

from runner.isolation import sweep_orphans
from runner.session.agent import AgentError, parse_agent, remember
from runner.session.leases import Holder, hold
from runner.session.runtime import Runtime
from runner.session.storage import Storage
from runner.state import (
    SCHEMA_CHANGES,
    SESSION_SCHEMA_VERSION,
    SessionTail,
    StoreAlignedClock,
    migrate,
)
from runner.state.transitions import expire_due, set_status
from runner.stores import Continuation, LeasedSession

logger = logging.getLogger(__name__)


class SessionError(Exception):
    """What was asked cannot be done to this session; the message says why."""


class UnknownToken(SessionError):
    def __init__(self, token: str) -> None:
        super().__init__(f"no call has the continuation token {token!r}")
        self.token = token


@dataclass(frozen=True)
class GateSettings:
    """Who holds leases and for how long; what the gate lets through."""

    owner: str
    lease_s: float
    #: How long to wait for someone else's lease (None: one lease period and a bit).
    lease_wait_s: float | None = None
    #: Holders that died in a row before a session is quarantined.
    poison_after: int = 3
    migrate: bool = False
    allow_agent_change: bool = False


@asynccontextmanager
async def open_session(
    rt: Runtime, settings: GateSettings, session_id: str, wait_s: float | None = None
) -> AsyncIterator[tuple[SessionTail, Holder]]:
    """The gate for an engine that knows its agent before the session (DurableAgent)."""
    async with leased(rt.storage, settings, session_id, wait_s) as (session, holder):
        await admit(rt, settings, session, holder)
        yield session, holder


@asynccontextmanager
async def leased(
    storage: Storage, settings: GateSettings, session_id: str | None = None,
    wait_s: float | None = None, *, token: str | None = None,
) -> AsyncIterator[tuple[SessionTail, Holder]]:  # fmt: skip
    """Hold the session's lease and load it: the one load an operation makes under the
    lease, from which the Engine learns the session's agent, and in the same store call
    (DurableStore.lease_and_load). The session is `session_id`'s, or (`token`) the one a
    continuation token leads to, found in that call too (UnknownToken if none). A
    missing session is SessionNotFound, and no lease is taken on nothing."""
    if (session_id is None) == (token is None):
        raise TypeError("leased: give a session id or a continuation token, not both")
    store = storage.durable
    if store is None:  # no leases: the one load
        if token is not None:
            found = await storage.run(storage.store.find, token)
            if found is None:
                raise UnknownToken(token)
            session_id = found.session_id
        assert session_id is not None
        yield await storage.run(storage.store.load, session_id, history=False), Holder(None)
        return
    owner, ttl_s = settings.owner, settings.lease_s

    async def take() -> LeasedSession | str:
        nonlocal session_id
        if session_id is not None:
            taken = await storage.run(store.lease_and_load, session_id, owner, ttl_s)
            return session_id if taken is None else taken
        assert token is not None
        by_token = await storage.run(store.lease_and_load_token, token, owner, ttl_s)
        if by_token is None:
            raise UnknownToken(token)
        if isinstance(by_token, Continuation):  # busy: try again by the session's id
            session_id = by_token.session_id
            return session_id
        return by_token

    wait = wait_s if wait_s is not None else (settings.lease_wait_s or settings.lease_s + 5)
    async with hold(storage, ttl_s, wait, take) as (session, holder):
        yield session, holder


async def admit(rt: Runtime, settings: GateSettings, session: SessionTail, holder: Holder) -> None:
    """What the gate does with a leased session before anyone touches it (the module)."""
    if holder.lease is not None and isinstance(rt.clock, StoreAlignedClock):
        # The lease began at the store's now: the engine's clock follows it, free.
        rt.clock.calibrate(holder.lease.expires_ms - int(settings.lease_s * 1000))
    takeovers = holder.takeovers
    if takeovers >= settings.poison_after and session.status in ("running", "waiting"):
        set_status(session, "quarantined")
        session.quarantine_reason = (
            f"{takeovers} holders in a row died while advancing it; inspect it with"
            " `session show`, then `session resume --unquarantine`"
        )
        logger.warning("session %s quarantined: %s", session.id, session.quarantine_reason)
        await rt.commit(session, holder)
    elif takeovers:
        logger.info("took session %s over from a dead holder; sweeping orphans", session.id)
        await anyio.to_thread.run_sync(sweep_orphans)
    await _check_versions(rt, settings, session, holder)
    if expire_due(session, rt.clock.now_ms()):
        await rt.settle_and_commit(session, holder)


async def _check_versions(
    rt: Runtime, settings: GateSettings, session: SessionTail, holder: Holder
) -> None:
    if session.schema_version < SESSION_SCHEMA_VERSION:
        if not settings.migrate:
            changes = "; ".join(SCHEMA_CHANGES[v] for v in range(
                session.schema_version + 1, SESSION_SCHEMA_VERSION + 1))  # fmt: skip
            raise SessionError(
                f"session {session.id} was written with session schema"
                f" {session.schema_version}; this program uses {SESSION_SCHEMA_VERSION}"
                f" ({changes}); give --migrate to upgrade it"
            )
        session.schema_version = migrate(session).schema_version
        await rt.commit(session, holder)
    changed = await _agent_changes(rt, session)
    if changed:
        if not settings.allow_agent_change:
            raise SessionError(
                f"session {session.id} started with a different agent definition"
                f" ({changed}); give --allow-agent-change to continue with this one"
            )
        store = rt.storage.store
        remember(rt.agent, rt.keyring)  # the store gets the document without its values
        await rt.storage.run(store.put_agent, rt.agent.hash, rt.agent.to_document())
        session.agent_hash = rt.agent.hash
        await rt.commit(session, holder)


async def _agent_changes(rt: Runtime, session: SessionTail) -> str | None:
    """What differs between the session's stored agent and this one (its execution
    mode aside: commands may choose it), or None."""
    if session.agent_hash == rt.agent.hash:
        return None
    document = await rt.storage.run(rt.storage.store.agent_document, session.agent_hash)
    try:
        stored = parse_agent(document, "stored agent")
    except AgentError as exc:
        return f"the stored definition no longer parses: {exc}"
    old = stored.with_mode("synchronous").to_document()
    new = rt.agent.with_mode("synchronous").to_document()
    if old == new:
        return None
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if "tools" in keys:
        before = {t["name"]: t for t in old["tools"]}
        after = {t["name"]: t for t in new["tools"]}
        tools = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
        keys[keys.index("tools")] = f"tools: {', '.join(tools)}"
    return "changed: " + "; ".join(keys)
