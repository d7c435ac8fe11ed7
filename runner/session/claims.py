"""Claims that lapse: what becomes of a deferred call whose claimer stopped
renewing its claim (DurableStore.claim_calls hands calls out; runner.server.claims is
the HTTP side).

The sweep decides each lapsed claim. A call whose tool has external effects (its
ToolSpec in the session's stored agent says `effects: external`, or the agent does not
declare the tool at all) may have done its work already: it gets an UNKNOWN_OUTCOME
result through the engine's `complete_calls`, which moves it to unknown_outcome for an operator (or
the claimer's late result) to settle, and the claim is marked `lapsed`. Any other call is
claimable again: its claim is marked `released`.

The claim is marked before the call moves, so a heartbeat racing the sweep is told the
truth. A sweep that stops in between leaves a lapsed claim on a deferred call, which
`lapsed_claims` returns again, and the next sweep finishes the move.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Literal

import anyio
import anyio.to_thread

from runner.session.agent import AgentError, parse_agent
from runner.session.gate import SessionError
from runner.session.leases import LeaseBusy
from runner.session.scheduler import with_durable_workflows
from runner.session.settings import AgentSettings
from runner.state.effects import unknown_if_interrupted, unknown_outcome
from runner.stores import Claim, DurableStore, SessionNotFound, StoreError

logger = logging.getLogger(__name__)

#: Lapsed claims one sweep decides at most (the next sweep takes the rest).
SWEEP_BATCH = 100
#: How often `keep_sweeping_claims` sweeps.
SWEEP_EVERY_S = 1.0
#: How long a sweep waits for the lease of a session someone is advancing; past it the
#: claim is left to the next sweep.
LEASE_WAIT_S = 1.0


async def sweep_claims(
    store: DurableStore, settings: AgentSettings | None = None, *, limit: int = SWEEP_BATCH
) -> int:
    """Decide up to `limit` lapsed claims, their sessions advanced as `settings` say;
    returns how many were settled. A claim that cannot be settled now (its session busy,
    the store away) is logged and left to the next sweep."""
    lapsed = await anyio.to_thread.run_sync(store.lapsed_claims, limit)
    settled = 0
    for claim in lapsed:
        try:
            settled += await _settle(store, claim, settings)
        except (SessionError, LeaseBusy, AgentError, StoreError) as exc:
            logger.warning("claim %s (call %s of session %s) lapsed and is not settled yet:"
                           " %s; the next sweep tries again", claim.token, claim.call_id,
                           claim.session_id, exc)  # fmt: skip
    return settled


async def keep_sweeping_claims(
    store: DurableStore, settings: AgentSettings | None = None, every_s: float = SWEEP_EVERY_S
) -> None:
    """Sweep every `every_s` until cancelled (`agents-runner serve` runs this)."""
    while True:
        try:
            await sweep_claims(store, settings)
        except Exception:  # a sweep's failure must not stop the server; the next one retries
            logger.exception("sweeping lapsed claims failed")
        await anyio.sleep(every_s)


async def _settle(store: DurableStore, claim: Claim, settings: AgentSettings | None) -> bool:
    """Release the claim, or mark it lapsed and move its call to unknown_outcome."""
    try:
        session = await anyio.to_thread.run_sync(
            lambda: store.load(claim.session_id, history=False)
        )
    except SessionNotFound:
        return await _mark(store, claim, "released")
    call = session.calls.get(claim.call_id)
    if call is None or call.state != "deferred":  # it ended meanwhile: nothing to hand out
        return await _mark(store, claim, "released")
    document = await anyio.to_thread.run_sync(store.agent_document, session.agent_hash)
    agent = parse_agent(document, f"the stored agent of session {session.id}")
    if not unknown_if_interrupted(agent.effects_of(call.tool)):
        return await _mark(store, claim, "released")
    if not await _mark(store, claim, "lapsed"):
        return False  # renewed or finished meanwhile
    durable = replace(with_durable_workflows(agent.with_mode("asynchronous"), store,
                                             settings=settings),
                      lease_wait_s=LEASE_WAIT_S)  # fmt: skip
    unknown = unknown_outcome(
        f"the claimer {claim.claimer!r} that claimed this call stopped renewing its claim"
        " before giving a result",
        "the call is not handed out again",
        "its result arrives or an operator decides",
    )
    report = await durable.complete_calls(session.id, [(call.token, unknown)])
    if report.applied:
        logger.info("claim %s lapsed: call %s of session %s is now unknown_outcome",
                    claim.token, call.id, session.id)  # fmt: skip
    return True


async def _mark(store: DurableStore, claim: Claim, state: Literal["released", "lapsed"]) -> bool:
    return await anyio.to_thread.run_sync(store.settle_lapsed, claim.token, state)
