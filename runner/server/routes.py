"""The seed's endpoints, with agents-exe's semantics (the operator's other actions are
in actions.py, what POST /v1/sessions takes in is checked in intake.py). Store and engine
calls run in worker threads or through the engine's own async API; their expected
failures become problems (see `engine_errors`), so no client mistake is a 500. `Caller`,
`Config`, `require`, `call`, `complete_by_token` and `engine_errors` are what the other
route modules build on; every operation on a session goes through the app's one Engine
(`Settings.engine`, runner.session.engine), which keeps the stored agents it runs."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
from fastapi import APIRouter, Body, Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from runner.server import contract, intake
from runner.server.auth import GRANT_KEY, Grant
from runner.server.inline import InlineRules
from runner.server.problems import Problem, responses
from runner.server.visibility import view_of
from runner.session import (
    AgentError,
    Engine,
    LeaseBusy,
    Session,
    SessionError,
    SessionTail,
    StoreCapabilityError,
    ToolResult,
    TrackedCall,
    UnknownToken,
    pending_entry,
)
from runner.session.agent import remember_files
from runner.session.operator import CONDITIONS, conditions
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
    #: The runs this process started (agents-server's `wait`, its `running` status).
    runs: contract.Runs = field(default_factory=contract.Runs)
    #: The agent files of `agents_dir` as read, with `agents.api_keys` (intake.AgentFiles).
    agent_files: intake.AgentFiles = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "agent_files", intake.AgentFiles(self.agents.api_keys))


class CreateSession(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent: str | dict[str, Any] = Field(
        description="the slug of an agent in the server's --agents DIR (agents-server's"
        " name for it), a file name there, or (operator only) an agent definition: the"
        " JSON object an agent file holds, its script given as `responses`"
    )
    prompt: str = Field(min_length=1)
    attachments: list[intake.AttachmentBody] = Field(
        default_factory=list, description="files given with the prompt (as `--attach`)"
    )
    media: list[intake.MediaBody] = Field(
        default_factory=list, description="agents-server's attachments (after `attachments`)"
    )
    run: Literal["none", "step", "until_blocked"] | bool | None = Field(
        None,
        description="how far the run goes: none, step, until_blocked (the default);"
        " true is until_blocked and waits for it, false none (our older boolean)",
    )

    @field_validator("run", mode="before")
    @classmethod
    def _one_mode(cls, value: object) -> object:
        """One clear refusal for a value that is neither a mode nor a boolean."""
        if value is None or isinstance(value, bool) or value in contract.RUN_MODES:
            return value
        raise ValueError(f"expected one of {', '.join(contract.RUN_MODES)}, true or false")


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
    try:
        yield
    finally:
        await app.state.settings.runs.close()


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


WaitQuery = Annotated[bool, Query(description="answer when the run stops")]
TimeoutQuery = Annotated[float | None, Query(description="seconds to wait with wait=true"
                                             " (default 120, at most 600)")]  # fmt: skip


@router.post("/v1/sessions", status_code=201, responses=responses(400, 404, 409, 422))
async def create_session(
    body: CreateSession, config: Config, who: Caller, wait: WaitQuery = False,
    timeout: TimeoutQuery = None,  # noqa: ASYNC109  agents-server's query parameter
) -> JSONResponse:  # fmt: skip
    """agents-server's create: store the session, start its run (`run`), answer `201`
    with the session, its pending calls and a `Location` header; with `wait=true`, once
    the run stops (or `timeout` passes: then `status` is `running`)."""
    require(who, "operator")
    mode = contract.run_mode(body.run)
    limit = contract.wait_timeout(timeout)
    definition = await anyio.to_thread.run_sync(intake.agent_of, body.agent, config.agents_dir,
                                                who, config.inline,
                                                config.agent_files)  # fmt: skip
    attachments = intake.attachments_of([*body.attachments, *intake.as_attachments(body.media)])
    engine = config.engine
    with engine_errors():
        session = await engine.start(definition.with_mode("asynchronous"), body.prompt,
                                     attachments)  # fmt: skip
    start_run(config, session.id, mode)
    if wait or body.run is True:  # our boolean always answered once the run stopped
        await await_stop(config, session.id, limit)
    answer = await session_body(config, who, session.id)
    return JSONResponse(answer, 201, headers={"Location": f"/v1/sessions/{session.id}"})


def start_run(config: Settings, session_id: str, mode: contract.RunMode) -> bool:
    """Start a run of `mode` on the session in the background (False: none started, for
    `none` or when one is going). A lease held elsewhere: that process advances it."""
    if mode == "none":
        return False
    engine = config.engine

    async def run() -> None:
        with engine_errors(), suppress(LeaseBusy):
            if mode == "step":
                await engine.step(session_id)
            else:
                await engine.resume(session_id)

    return config.runs.start(session_id, run)


#: How often a `wait=true` looks again at a lease another process holds (seconds).
LEASE_POLL_S = 0.05


async def await_stop(config: Settings, session_id: str, limit_s: float) -> bool:
    """Wait up to `limit_s` for the session's run to stop: this process's, then one
    another process holds the lease for (the session worker `serve` runs beside the
    app, another server); True when none is going any more."""
    with anyio.move_on_after(limit_s):
        await config.runs.wait(session_id, limit_s)
        store = config.store
        while True:  # a lease held elsewhere tells no event here when it is let go
            if not await call(lambda: contract.held(store.lease(session_id), store.now_ms())):
                return True
            await anyio.sleep(LEASE_POLL_S)
    return False


async def session_body(config: Settings, who: Grant | None, session_id: str) -> dict[str, Any]:
    """The session as agents-server's session endpoints answer it (contract.body)."""
    store = config.store

    def read() -> tuple[Session, bool]:
        session = store.load(session_id)
        return session, contract.held(store.lease(session_id), store.now_ms())

    session, leased = await call(read)
    return contract.body(session, leased or config.runs.active(session_id), view_of(who))


@router.get("/v1/sessions", responses=responses(400, 404, 422))
async def list_sessions(
    config: Config, who: Caller,
    status: Annotated[str | None, Query(description="agents-server's statuses, comma"
                                        " separated, or one of our conditions")] = None,
    agent: Annotated[str | None, Query(description="only this agent's sessions (slug)")] = None,
    parent: Annotated[str | None, Query(description="sub-sessions of this session")] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="page size")] = 50,
    before: Annotated[str | None, Query(description="a page's `next_before`")] = None,
) -> dict[str, Any]:  # fmt: skip
    """agents-server's listing, newest first (by `updated_at`), in pages: `next_before`
    is set when the page is full; pass it as `before` for the next one. A page may hold
    more than `limit` sessions when several share its last `updated_at` (so that none
    is skipped). Each entry is the session's metadata with our `id`, `state`,
    `agent_slug`, `updated_ms` and `conditions` beside it."""
    require(who, "operator", "viewer")
    wanted = set(status.split(",")) if status else set()
    unknown = sorted(wanted - set(contract.STATUSES) - set(CONDITIONS))
    if unknown:
        raise Problem(422, "invalid_field", f"query.status: expected agents-server's"
                      f" {', '.join(contract.STATUSES)} or one of {', '.join(CONDITIONS)},"
                      f" got {unknown[0][:40]!r}")  # fmt: skip
    before_ms = contract.parse_iso(before, "query.before") if before is not None else None
    store, runs = config.store, config.runs

    def rows() -> tuple[list[dict[str, Any]], str | None]:
        if parent is not None:
            store.load(parent, history=False)  # 404 for an unknown one
            return [], None  # no session of ours has a parent (sub-agents are not sessions)
        now, out = store.now_ms(), list[dict[str, Any]]()
        summaries = sorted(store.list(), key=lambda r: (-r.updated_ms, r.id))
        for row in summaries:
            if before_ms is not None and row.updated_ms >= before_ms:
                continue
            if agent is not None and row.agent_slug != agent:
                continue
            if len(out) >= limit and row.updated_ms != out[-1]["updated_ms"]:
                return out, contract.iso(out[-1]["updated_ms"])
            session, lease = store.load(row.id, history=False), store.lease(row.id)
            found = conditions(session, lease, now)
            entry = contract.meta(session, contract.held(lease, now) or runs.active(row.id))
            if wanted and not (wanted & {entry["status"], *found}):
                continue
            out.append({**entry, **row.__dict__, "state": row.status, "conditions": found})
        return out, None

    sessions, next_before = await call(rows)
    return view_of(who).body({"sessions": sessions, "next_before": next_before})


@router.get("/v1/sessions/{session_id}", responses=responses(400, 404, 409, 422))
async def show_session(
    session_id: str, config: Config, who: Caller, wait: WaitQuery = False,
    timeout: TimeoutQuery = None,  # noqa: ASYNC109  agents-server's query parameter
) -> JSONResponse:  # fmt: skip
    """The session: our operator's document (`turns`, `calls`, `why`, `conditions`, our
    status as `state`) and agents-server's session body (its `status`, `version`,
    `session.turns`, `pending`). With `wait=true`, once this process's run on it stops
    (`timeout`): 202 when one is still going."""
    require(who, "operator", "viewer")
    limit = contract.wait_timeout(timeout)
    stopped = await await_stop(config, session_id, limit) if wait else True
    with engine_errors():
        document = view_of(who).document((await config.engine.show(session_id)).document())
    theirs = await session_body(config, who, session_id)
    merged = {**document, **theirs, "state": document.get("status")}
    return JSONResponse(merged, 200 if stopped else 202)


@router.get("/v1/sessions/{session_id}/pending", responses=responses(404, 409, 422))
async def pending(session_id: str, config: Config, who: Caller) -> dict[str, Any]:
    require(who, "operator", "viewer", "claimer")
    with engine_errors():
        found = await config.engine.pending(session_id)
    session, late = found.session, found.overdue
    view = view_of(who)
    calls = view.calls([pending_entry(c, overdue=c.id in late) for c in session.open_calls()])
    return view.body({"session_id": session.id, "status": session.status, "calls": calls})


async def complete_by_token(config: Config, who: Grant | None, token: str, result: ToolResult,
               resume: bool) -> JSONResponse:  # fmt: skip
    """agents-exe's continuation answers: applied, already_completed (200), unknown_token
    (404), token_already_completed (409), expired (410, the result kept as late)."""
    authorize = None
    if who is not None and who.role != "operator":
        require(who, "claimer")
        grant = who

        def authorize(tracked: TrackedCall) -> None:  # sees the call the gate loaded
            if not grant.may_use(tracked.tool):
                raise Problem(403, "forbidden", f"the claimer token {grant.name!r} is not"
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
    return await complete_by_token(config, who, token, result, body.resume)


@router.post("/v1/continuations/{token}/fail", responses=responses(404, 409, 410))
async def fail(token: str, body: Failure, config: Config, who: Caller) -> JSONResponse:
    if not body.reason.strip():
        raise Problem(422, "invalid_field", "body.reason: must say why the call failed")
    return await complete_by_token(config, who, token, ToolResult.error("TOOL_FAILED", body.reason),
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
