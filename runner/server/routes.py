"""The seed's endpoints, with agents-exe's semantics (the operator's other actions are
in actions.py, what POST /v1/sessions takes in is checked in intake.py). Store and engine
calls run in worker threads or through the engine's own async API; their expected
failures become problems (see `engine_errors`), so no client mistake is a 500. `Caller`,
`Config`, `require`, `call`, `wake` and `engine_errors` are what the other route modules
build on; every operation on a session goes through the app's one Engine
(`Settings.engine`, runner.session.engine), which keeps the stored agents it runs."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio.to_thread
from fastapi import APIRouter, Body, Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from runner.server import intake
from runner.server.auth import GRANT_KEY, Grant
from runner.server.inline import InlineRules
from runner.server.problems import Problem, responses
from runner.server.visibility import view_of
from runner.session import (
    AgentError,
    Engine,
    LeaseBusy,
    SessionError,
    SessionTail,
    StoreCapabilityError,
    ToolResult,
    TrackedCall,
    UnknownToken,
    pending_entry,
)
from runner.session.agent import remember_files
from runner.session.operator import CONDITIONS
from runner.session.results import ResultError, result_from_value
from runner.session.settings import AgentSettings
from runner.stores import DurableStore, SessionNotFound, StoreError

log = logging.getLogger(__name__)
T = TypeVar("T")
#: How long `resume: true` waits for a lease someone has just let go.
RESUME_LEASE_WAIT_S = 1.0


@dataclass(frozen=True)
class Settings:
    store: DurableStore
    #: What every operation on a session goes through (on `store`).
    engine: Engine
    agents_dir: Path | None
    grants: list[Grant] | None  # None: no access control (`serve --no-auth`)
    #: Raises, saying why, when the Docker engine is unreachable (None: not checked).
    docker_check: Callable[[], None] | None = None
    #: What agents posted inline may do (`serve --trust-inline-agents`, `--allow-base-url`).
    inline: InlineRules = field(default_factory=InlineRules)
    #: What every agent the server runs is given: lease length, audit, egress network
    #: (`serve` reads them from its environment: runner/cli/settings.py).
    agents: AgentSettings = field(default_factory=AgentSettings)


class CreateSession(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent: str | dict[str, Any] = Field(
        description="a file name in the server's --agents DIR, or (operator only) an agent"
        " definition: the JSON object an agent file holds, its script given as `responses`"
    )
    prompt: str = Field(min_length=1)
    attachments: list[intake.AttachmentBody] = Field(
        default_factory=list, description="files given with the prompt (as `--attach`)"
    )
    run: bool = Field(False, description="advance the session until its first wait")


class Readiness(BaseModel):
    status: str = Field(description="ready or unavailable")
    store: str | None = Field(None, description="ok, or why the store cannot be reached;"
                              " only for a caller with a valid token")  # fmt: skip
    docker: str | None = Field(None, description="ok, or why the Docker engine cannot be"
                               " reached; absent when the server does not check it")  # fmt: skip


class Continuation(BaseModel):
    model_config = ConfigDict(extra="forbid")
    result: Any = Field(description="a UserToolResponse, a ToolCallResult or any JSON")
    resume: bool = False


class Failure(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, description="what the model is told")
    resume: bool = False


def settings(request: Request) -> Settings:
    found: Settings = request.app.state.settings
    return found


def caller(request: Request) -> Grant | None:
    """Who is asking (None without access control), as auth.Authenticate decided before
    the body was read; 401 when it found no known bearer token."""
    if settings(request).grants is None:
        return None
    grant: Grant | None = request.scope.get(GRANT_KEY)
    if grant is None:
        raise Problem(401, "unauthorized", "a valid bearer token is required")
    return grant


Caller = Annotated[Grant | None, Depends(caller)]
Config = Annotated[Settings, Depends(settings)]


def require(grant: Grant | None, *roles: str) -> None:
    if grant is not None and grant.role not in roles:
        raise Problem(403, "forbidden", f"the {grant.role} token {grant.name!r} may not do this")


@contextmanager
def engine_errors() -> Iterator[None]:
    """The engine's expected failures as problems."""
    try:
        yield
    except SessionNotFound as exc:
        raise Problem(404, "unknown_session", str(exc)) from exc
    except UnknownToken as exc:
        raise Problem(404, "unknown_token", str(exc)) from exc
    except (AgentError, ResultError) as exc:
        raise Problem(422, "invalid", str(exc)) from exc
    except (SessionError, LeaseBusy) as exc:
        raise Problem(409, "conflict", str(exc)) from exc
    except (StoreError, StoreCapabilityError) as exc:
        log.warning("store error: %s", exc)
        raise Problem(503, "store_unavailable", str(exc)) from exc


async def call(function: Callable[..., T], *args: Any) -> T:
    with engine_errors():
        return await anyio.to_thread.run_sync(function, *args)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Read the agents directory once at start: the env values of its specs are never
    stored, and the sessions the app's engine advances get them from these files (its
    keyring)."""
    agents_dir, engine = app.state.settings.agents_dir, app.state.settings.engine
    if agents_dir is not None:
        keys = app.state.settings.agents.api_keys
        read = await anyio.to_thread.run_sync(remember_files, agents_dir, engine.keyring, keys)
        log.info("read %d agent file(s) from %s", read, agents_dir)
    yield


router = APIRouter(lifespan=lifespan)


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=Readiness, response_model_exclude_none=True,
            responses={503: {"model": Readiness, "description": "not ready"}})  # fmt: skip
async def readyz(config: Config, request: Request) -> JSONResponse:
    """Ready when the store answers and, when the server checks it, the Docker engine.
    What each check found is said only to a caller with a valid token (or without
    access control); others get the status alone."""
    body = {"status": "ready", "store": "ok"}
    checks: list[tuple[str, Callable[[], object]]] = [("store", config.store.now_ms)]
    if config.docker_check is not None:
        checks.append(("docker", config.docker_check))
    for name, check in checks:
        try:
            await anyio.to_thread.run_sync(check)
        except Exception as exc:  # any failure to reach it means not ready
            log.warning("readyz: the %s is unreachable: %s", name, exc)
            body[name], body["status"] = str(exc) or type(exc).__name__, "unavailable"
        else:
            body[name] = "ok"
    code = 200 if body["status"] == "ready" else 503
    if config.grants is not None and request.scope.get(GRANT_KEY) is None:
        return JSONResponse({"status": body["status"]}, code)  # error texts are for callers
    return JSONResponse(body, code)


@router.post("/v1/sessions", status_code=201, responses=responses(409, 422))
async def create_session(body: CreateSession, config: Config, who: Caller) -> dict[str, Any]:
    require(who, "operator")
    keys = config.agents.api_keys
    definition = await anyio.to_thread.run_sync(intake.agent_of, body.agent, config.agents_dir,
                                                who, config.inline, keys)  # fmt: skip
    attachments = intake.attachments_of(body.attachments)
    engine = config.engine
    with engine_errors():
        session = await engine.start(definition.with_mode("asynchronous"), body.prompt,
                                     attachments)  # fmt: skip
    status = session.status
    if body.run:
        # LeaseBusy: a worker took it first, and it advances the session.
        with engine_errors(), suppress(LeaseBusy):
            status = (await engine.resume(session.id)).status
    return {"session_id": session.id, "status": status}


@router.get("/v1/sessions", responses=responses(422))
async def list_sessions(
    config: Config, who: Caller, status: Annotated[str | None, Query()] = None
) -> dict[str, Any]:
    require(who, "operator", "viewer")
    if status is not None and status not in CONDITIONS:
        raise Problem(422, "invalid_field", f"query.status: expected one of"
                      f" {', '.join(CONDITIONS)}, got {status!r}")  # fmt: skip
    with engine_errors():
        listed = await config.engine.list(status)
    rows = [{**row.summary.__dict__, "conditions": row.conditions} for row in listed]
    return view_of(who).body({"sessions": rows})


@router.get("/v1/sessions/{session_id}", responses=responses(404, 409, 422))
async def show_session(session_id: str, config: Config, who: Caller) -> dict[str, Any]:
    require(who, "operator", "viewer")
    with engine_errors():
        return view_of(who).document((await config.engine.show(session_id)).document())


@router.get("/v1/sessions/{session_id}/pending", responses=responses(404, 409, 422))
async def pending(session_id: str, config: Config, who: Caller) -> dict[str, Any]:
    require(who, "operator", "viewer", "worker")
    with engine_errors():
        found = await config.engine.pending(session_id)
    session, late = found.session, found.overdue
    view = view_of(who)
    calls = view.calls([pending_entry(c, overdue=c.id in late) for c in session.open_calls()])
    return view.body({"session_id": session.id, "status": session.status, "calls": calls})


async def wake(config: Config, who: Grant | None, token: str, result: ToolResult,
               resume: bool) -> JSONResponse:  # fmt: skip
    """agents-exe's continuation answers: applied, already_completed (200), unknown_token
    (404), token_already_completed (409), expired (410, the result kept as late)."""
    authorize = None
    if who is not None and who.role != "operator":
        require(who, "worker")
        grant = who

        def authorize(tracked: TrackedCall) -> None:  # sees the call the gate loaded
            if not grant.may_use(tracked.tool):
                raise Problem(403, "forbidden", f"the worker token {grant.name!r} is not"
                              " granted the tool of this call")  # fmt: skip

    engine = config.engine
    with engine_errors():
        report = await engine.complete(token, result, authorize)
    answered = report.session.call_by_token(token)
    call_id = answered.id if answered is not None else "?"
    if report.conflicting:
        raise Problem(409, "token_already_completed", f"call {call_id} already ended"
                      " with a different result; this one was refused")  # fmt: skip
    if report.late:
        raise Problem(410, "expired", f"call {call_id} had expired; the result is kept"
                      " as late and changes nothing")  # fmt: skip
    body: dict[str, Any] = {"status": "already_completed" if report.already_completed
                            else "applied", "session_id": report.session.id,
                            "session_status": report.session.status}  # fmt: skip
    if resume and report.session.status == "running":
        with engine_errors():
            try:
                resumed = await engine.resume(report.session.id, lease_wait_s=RESUME_LEASE_WAIT_S)
                body["resumed"] = view_of(who).report(resumed)
            except LeaseBusy:  # held by a live process, which continues it
                body["resumed"] = None
    return JSONResponse(view_of(who).body(body))


@router.post("/v1/continuations/{token}", responses=responses(404, 409, 410))
async def complete(token: str, body: Continuation, config: Config, who: Caller) -> JSONResponse:
    with engine_errors():
        result = result_from_value(body.result, "body.result")
    return await wake(config, who, token, result, body.resume)


@router.post("/v1/continuations/{token}/fail", responses=responses(404, 409, 410))
async def fail(token: str, body: Failure, config: Config, who: Caller) -> JSONResponse:
    if not body.reason.strip():
        raise Problem(422, "invalid_field", "body.reason: must say why the call failed")
    return await wake(config, who, token, ToolResult.error("TOOL_FAILED", body.reason),
                      body.resume)  # fmt: skip


class ResumeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    retry: bool = Field(False, description="run a failed session again (a fresh model-call"
                        " budget), as `session resume --retry`")  # fmt: skip
    unquarantine: bool = Field(False, description="let a quarantined session run again")
    migrate: bool = Field(False, description="upgrade a session from an older schema")


@router.post("/v1/sessions/{session_id}/resume", responses=responses(404, 409, 422))
async def resume(
    session_id: str, config: Config, who: Caller,
    options: Annotated[ResumeOptions | None, Body()] = None,
) -> dict[str, Any]:  # fmt: skip
    """Step until the final answer or the next wait (a frozen session continues; a
    failed one only with `retry`, a quarantined one only with `unquarantine`: 409)."""
    require(who, "operator")
    options = options or ResumeOptions()
    stored = await call(lambda: config.store.load(session_id, history=False))
    refusal = resume_refusal(stored, options)
    if refusal is not None:
        raise Problem(409, "conflict", refusal)
    with engine_errors():
        report = await config.engine.resume(
            session_id, unquarantine=options.unquarantine, retry=options.retry,
            migrate=options.migrate,
        )  # fmt: skip
    return view_of(who).report(report)


def resume_refusal(session: SessionTail, options: ResumeOptions) -> str | None:
    """Why the engine would refuse this resume, in the API's words (it checks again
    under the lease: a session that changes meanwhile is refused in the CLI's)."""
    status, sid = session.status, session.id
    if (
        options.retry
        and status != "failed"
        and not (status == "quarantined" and options.unquarantine)
    ):
        return f"session {sid} is {status}, not failed; `retry` only applies to a failed session"
    if status == "failed" and not options.retry:
        return (f"session {sid} failed: {session.failure_reason}; fix the cause, then resume"
                ' with {"retry": true}')  # fmt: skip
    if status == "quarantined" and not options.unquarantine:
        return (f"session {sid} is quarantined: {session.quarantine_reason}; resume with"
                ' {"unquarantine": true} once it is safe')  # fmt: skip
    return None


@router.post("/v1/sessions/{session_id}/cancel", responses=responses(404, 409, 422))
async def cancel(session_id: str, config: Config, who: Caller) -> dict[str, Any]:
    require(who, "operator")
    with engine_errors():
        session = await config.engine.cancel(session_id)
    return {"session_id": session.id, "status": session.status}
