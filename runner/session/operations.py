"""What each advancing operation does once the gate has let it in, written once for
both ways in: `DurableAgent` (one agent, known before the session) and `Engine` (any
stored agent, found from the session the gate loads). Each takes an `Opener`
(runner.session.runtime) and nothing else of its caller."""

from __future__ import annotations

from dataclasses import replace

from runner.session import commands, stepper
from runner.session.gate import SessionError
from runner.session.reports import StepReport
from runner.session.runtime import Opener
from runner.state.transitions import set_status


async def resume(
    open_: Opener, *, unfreeze: bool = True, unquarantine: bool = False, retry: bool = False
) -> StepReport:
    """Step until the final answer or the next wait (see DurableAgent.resume)."""
    async with open_() as (rt, session, holder):
        if (unfreeze and session.status == "frozen") or (
            unquarantine and session.status == "quarantined"
        ):
            set_status(session, "running")
            session.quarantine_reason = None
            await rt.settle_and_commit(session, holder)
        elif retry:
            commands.revive(session)
            await rt.settle_and_commit(session, holder)
        if session.status == "quarantined":
            raise SessionError(f"session {session.id} is quarantined: {session.quarantine_reason}")
        if session.status == "failed":
            raise SessionError(f"session {session.id} failed: {session.failure_reason};"
                               " give --retry to try again")  # fmt: skip
        return await stepper.resume(rt, session, holder)


async def step(open_: Opener) -> StepReport:
    async with open_() as (rt, session, holder):
        return await stepper.step(rt, session, holder)


async def run_isolated(open_: Opener) -> StepReport:
    """Run the detached RunIsolated calls the session waits on."""
    async with open_() as (rt, session, holder):
        return await stepper.run_detached(rt, session, holder)


async def work(open_: Opener) -> StepReport:
    """What a session worker does with a due session: run its detached calls, resume it
    (letting go of it while a retry backs off)."""
    async with open_() as (rt, session, holder):
        detached = await stepper.run_detached(rt, session, holder)
        report = await stepper.resume(rt, detached.session, holder, stop_at_backoff=True)
        return replace(report, ran=detached.ran + report.ran)
