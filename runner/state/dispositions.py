"""A disposition as stored (its JSON; the models are runner.session.policy's): the one
reading of `decorate`, which wraps an `inner` disposition in `decorators`, outermost
first. Read leniently, so a document another version wrote still reads."""

from __future__ import annotations

from typing import Any


def unwrap_stored(disposition: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(decorators outermost first, the innermost non-decorate disposition)."""
    decorators: list[dict[str, Any]] = []
    while disposition.get("tag") == "decorate":
        decorators.extend(disposition.get("decorators", []))
        disposition = disposition.get("inner", {})
    return decorators, disposition


def detached(disposition: dict[str, Any]) -> bool:
    """An isolated call left for a worker to claim (`attached: false`), not run in the step.
    The one rule: a stored call's wait (Session.waiting_on), how it is described
    (policy.describe_json) and a synchronous agent's running it attached (the stepper,
    which gives a model its JSON) all ask it."""
    base = unwrap_stored(disposition)[1]
    return base.get("tag") == "runIsolated" and base.get("attached") is False
