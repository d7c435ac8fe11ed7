"""The operator's actions the CLI has, over HTTP (resume with its options is in
routes.py beside the seed's endpoints):

    POST /v1/sessions/{id}/freeze            session freeze
    POST /v1/sessions/{id}/pause             session pause (one step, then its tokens)
    POST /v1/continuations/{token}/retry     session retry [--force]: {"force": true}

Operator only; the CLI's refusals are 409 problems (404 for an unknown session or token)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from runner.server.problems import Problem, responses
from runner.server.routes import Caller, Config, call, engine_errors, require
from runner.server.visibility import view_of

router = APIRouter()


class Retry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    force: bool = Field(False, description="run it again although its first attempt may"
                        " have had its external effects (required)")  # fmt: skip


@router.post("/v1/sessions/{session_id}/freeze", responses=responses(404, 409, 422))
async def freeze(session_id: str, config: Config, who: Caller) -> dict[str, Any]:
    """Stop the session where it is, for every process, until it is resumed."""
    require(who, "operator")
    with engine_errors():
        session = await config.engine.freeze(session_id)
    return {"session_id": session.id, "status": session.status}


@router.post("/v1/sessions/{session_id}/pause", responses=responses(404, 409, 422))
async def pause(session_id: str, config: Config, who: Caller) -> dict[str, Any]:
    """agents-exe's pause: run one asynchronous step and persist it; the answer lists
    the continuation tokens of the calls the session waits on."""
    require(who, "operator")
    with engine_errors():
        report = await config.engine.pause(session_id)
    tokens = [c.token for c in report.session.waiting_on()]
    return {**view_of(who).report(report), "continuation_tokens": tokens}


@router.post("/v1/continuations/{token}/retry", responses=responses(404, 409, 422))
async def retry(
    token: str, config: Config, who: Caller, body: Annotated[Retry | None, Body()] = None
) -> dict[str, Any]:
    """Run a call in unknown_outcome again; only with `force`, since its first attempt
    may have had external effects."""
    require(who, "operator")
    store = config.store
    found = await call(store.find, token)
    if found is None:
        raise Problem(404, "unknown_token", f"no call has the continuation token {token!r}")
    session = await call(lambda: store.load(found.session_id))
    tracked = session.call_by_token(token)
    if tracked is not None and tracked.state != "unknown_outcome":
        raise Problem(409, "conflict", f"call {tracked.id} is {tracked.state}; only a call in"
                      " unknown_outcome can be retried")  # fmt: skip
    if body is None or not body.force:
        raise Problem(409, "force_required", f"call {found.call_id} may already have had its"
                      ' external effects; send {"force": true} to run it again anyway, or'
                      " settle it by completing or failing its continuation")  # fmt: skip
    with engine_errors():
        retried = await config.engine.retry(found.session_id, token, force=True)
    return {"session_id": retried.id, "status": retried.status, "retried": found.call_id}
