"""What a call's effects imply when its process dies before its outcome is recorded: the
one place that says it. `none` or `contained` (no network, no mounts: the sandbox went
with it) run again; `external` ones may already have reached the world, so the call's
outcome is unknown and it waits for an operator instead of running twice."""

from __future__ import annotations

from typing import Literal

from runner.state.models import UNKNOWN_OUTCOME, ToolResult

Effects = Literal["none", "contained", "external"]

#: How an operator settles a call whose outcome is unknown.
OPERATOR_DECIDES = "(session complete, session fail, or session retry --force)"


def unknown_if_interrupted(effects: Effects) -> bool:
    """Whether an attempt cut off before its outcome was recorded must not run again."""
    return effects == "external"


def unknown_outcome(what_happened: str, held: str, until: str) -> ToolResult:
    """The result that moves an interrupted call with external effects to unknown_outcome:
    what happened, what is held back, and until what."""
    return ToolResult.error(
        UNKNOWN_OUTCOME,
        f"{what_happened}; the tool has external effects, so {held} until {until}"
        f" {OPERATOR_DECIDES}",
    )
