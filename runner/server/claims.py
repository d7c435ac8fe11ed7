"""Claims for claimers in any language (docs/claims.md): `POST /v1/claims` leases
deferred calls of the tools asked for, each under a claim token that fences; a
heartbeat extends the lease; complete and fail give the result through the same path as
`POST /v1/continuations/{token}` (and its answers), after the claim is marked done. A
claim re-claimed by another claimer is refused with 409 and changes nothing.

Lapsed claims are swept (runner.session.claims) at each claim request, every
SWEEP_EVERY_S of a long poll, and periodically by `agents-runner serve`. Long polls
sleep on the event loop between attempts; every store call runs in a worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
import anyio.to_thread
from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from runner.server.auth import Grant
from runner.server.problems import Problem, responses
from runner.server.routes import (
    Caller,
    Config,
    Continuation,
    Failure,
    complete_by_token,
    engine_errors,
    require,
)
from runner.server.visibility import view_of
from runner.session.claims import sweep_claims
from runner.session.results import result_from_value
from runner.state import ToolResult
from runner.stores import Claim, ClaimLost

log = logging.getLogger(__name__)
T = TypeVar("T")

#: A long poll's pauses between attempts: from FIRST_PAUSE_S, doubling up to MAX_PAUSE_S.
FIRST_PAUSE_S = 0.05
MAX_PAUSE_S = 0.25
#: How often a long poll sweeps lapsed claims while it waits.
SWEEP_EVERY_S = 1.0
ToolName = Annotated[str, Field(min_length=1, max_length=64)]


class ClaimRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tools: list[ToolName] = Field(
        min_length=1, max_length=100, description="the tools whose deferred calls to claim"
    )
    lease_seconds: float = Field(60, ge=1, le=3600, description="how long each claim holds"
                                 " without a heartbeat")  # fmt: skip
    max: int = Field(1, ge=1, le=100, description="claim at most this many calls")
    wait_seconds: float = Field(0, ge=0, le=60, description="long poll: wait this long for"
                                " a claimable call before answering with none")  # fmt: skip


class Heartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lease_seconds: float | None = Field(None, ge=1, le=3600, description="the new lease,"
                                        " from now (default: the claim's)")  # fmt: skip


router = APIRouter()


#: `x-long-poll` names the field that makes the operation wait (a fuzzer sets it to 0).
@router.post("/v1/claims", responses=responses(422),
             openapi_extra={"x-long-poll": "wait_seconds"})  # fmt: skip
async def claim_calls(body: ClaimRequest, request: Request, config: Config,
                      who: Caller) -> dict[str, Any]:  # fmt: skip
    """Lease up to `max` deferred calls of `tools`; with `wait_seconds`, wait for one."""
    authorize(who, body.tools)
    store, claimer = config.store, who.name if who is not None else "anonymous"
    deadline = anyio.current_time() + body.wait_seconds
    pause, swept = FIRST_PAUSE_S, -SWEEP_EVERY_S
    while True:
        if anyio.current_time() - swept >= SWEEP_EVERY_S:
            with engine_errors():
                await sweep_claims(store, config.agents)
            swept = anyio.current_time()
        claims = await store_call(store.claim_calls, body.tools, claimer, body.lease_seconds,
                                  body.max)  # fmt: skip
        if claims:
            return {"claims": view_of(who).calls([claim_entry(c) for c in claims])}
        left = deadline - anyio.current_time()
        if left <= 0 or await request.is_disconnected():
            return {"claims": []}
        await anyio.sleep(min(pause, left))
        pause = min(pause * 2, MAX_PAUSE_S)


@router.post("/v1/claims/{claim}/heartbeat", responses=responses(409))
async def heartbeat(
    claim: str, config: Config, who: Caller, body: Annotated[Heartbeat | None, Body()] = None
) -> dict[str, Any]:
    """Extend the claim's lease from now (409 when it was re-claimed, went to
    unknown_outcome, was finished, or its call ended)."""
    store = config.store
    await held(config, who, claim)
    renewed = await store_call(store.renew_claim, claim, body.lease_seconds if body else None)
    session = await store_call(lambda: store.load(renewed.session_id, history=False))
    call = session.calls.get(renewed.call_id)
    if call is None or call.terminal:
        state = call.state if call is not None else "ended"
        raise Problem(409, "call_ended", f"call {renewed.call_id} is {state}; stop working on"
                      " it (a result now is refused, or kept as late)")  # fmt: skip
    return {"claim": claim, "state": renewed.state, "session_id": renewed.session_id,
            "tool_call_id": renewed.call_id, "lease_expires_ms": renewed.expires_ms,
            "lease_seconds": seconds(renewed.lease_ms)}  # fmt: skip


@router.post("/v1/claims/{claim}/complete", responses=responses(404, 409, 410, 422))
async def complete(claim: str, body: Continuation, config: Config, who: Caller) -> JSONResponse:
    """Give the claimed call its result (as POST /v1/continuations/{token})."""
    await held(config, who, claim)
    with engine_errors():
        result = result_from_value(body.result, "body.result")
    return await finish(config, who, claim, result, body.resume)


@router.post("/v1/claims/{claim}/fail", responses=responses(404, 409, 410, 422))
async def fail(claim: str, body: Failure, config: Config, who: Caller) -> JSONResponse:
    """Give the claimed call an error (as POST /v1/continuations/{token}/fail)."""
    await held(config, who, claim)
    if not body.reason.strip():
        raise Problem(422, "invalid_field", "body.reason: must say why the call failed")
    return await finish(config, who, claim, ToolResult.error("TOOL_FAILED", body.reason),
                        body.resume)  # fmt: skip


async def finish(config: Config, who: Grant | None, token: str, result: ToolResult,
                 resume: bool) -> JSONResponse:  # fmt: skip
    """Mark the claim done (409 and nothing changed for a superseded token), then apply
    the result. Done matches again, so a claimer whose apply failed (503) may retry."""
    done = await store_call(config.store.finish_claim, token)
    return await complete_by_token(config, who, done.continuation, result, resume)


def authorize(who: Grant | None, tools: list[str]) -> None:
    """Operators claim anything; a claimer only the tools it is granted; viewers nothing."""
    require(who, "operator", "claimer")
    refused = [t for t in tools if who is not None and not who.may_use(t)]
    if refused and who is not None:
        raise Problem(403, "forbidden", f"the claimer token {who.name!r} is not granted the"
                      f" tool(s) {', '.join(sorted(set(refused)))}")  # fmt: skip


async def held(config: Config, who: Grant | None, token: str) -> Claim:
    """The claim behind a token, for someone allowed its tool; 409 when none has it."""
    require(who, "operator", "claimer")
    found = await store_call(config.store.claim, token)
    if found is None:
        raise lost(ClaimLost(token))
    authorize(who, [found.tool])
    return found


async def store_call(function: Callable[..., T], *args: Any) -> T:
    """A store call in a worker thread: ClaimLost as its 409, the rest as `call` does."""
    with engine_errors():
        try:
            return await anyio.to_thread.run_sync(function, *args)
        except ClaimLost as exc:
            raise lost(exc) from exc


def lost(exc: ClaimLost) -> Problem:
    if exc.state == "lapsed":
        return Problem(409, "claim_lapsed", f"{exc}; if you have the result, post it to"
                       " /complete (or /fail) with this claim: it settles the call")  # fmt: skip
    if exc.state == "done":
        return Problem(409, "claim_done", str(exc))
    return Problem(409, "claim_superseded", f"{exc}; drop the call, its result is refused")


def claim_entry(claim: Claim) -> dict[str, Any]:
    call = claim.call
    assert call is not None, "claim_calls fills it"
    return {"claim": claim.token, "session_id": claim.session_id,
            "tool_call_id": claim.call_id, "continuation_token": claim.continuation,
            "tool": claim.tool, "arguments": call.arguments,
            "idempotency_key": call.idempotency_key, "lease_expires_ms": claim.expires_ms,
            "lease_seconds": seconds(claim.lease_ms)}  # fmt: skip


def seconds(ms: int) -> float | int:
    return ms // 1000 if ms % 1000 == 0 else ms / 1000
