"""Rows to values and back, the same on both engines: sessions' turn and call documents
(validated when written, so reading many at once is one pass of pydantic-core) and claims."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from runner.state import TrackedCall, Turn
from runner.stores.base import Claim, ClaimState, StoreError

TURN_LIST = TypeAdapter(list[Turn])
CALL_LIST = TypeAdapter(list[TrackedCall])
TURN = TypeAdapter(Turn)

#: The claims columns `claim_from_row` reads, in its order.
CLAIM_COLUMNS = (
    "token, session_id, call_id, tool, worker, state, expires_ms, lease_ms, continuation"
)
CLAIM_STATES: tuple[ClaimState, ...] = ("held", "released", "lapsed", "done")


def turns_of(documents: list[str]) -> list[Turn]:
    return TURN_LIST.validate_json("[" + ",".join(documents) + "]")


def calls_of(documents: list[str]) -> dict[str, TrackedCall]:
    """Calls by id, in the order of `documents`."""
    return {c.id: c for c in CALL_LIST.validate_json("[" + ",".join(documents) + "]")}


def claim_columns(alias: str) -> str:
    """CLAIM_COLUMNS, each prefixed with `alias`."""
    return ", ".join(f"{alias}.{column.strip()}" for column in CLAIM_COLUMNS.split(","))


def claim_from_row(row: tuple[Any, ...] | Any, call: TrackedCall | None = None) -> Claim:
    """A Claim from a row of CLAIM_COLUMNS."""
    token, session_id, call_id, tool, claimer, state, expires_ms, lease_ms, continuation = row
    if state not in CLAIM_STATES:
        raise StoreError(f"claim {token}: unknown state {state!r} in the store")
    return Claim(token, session_id, call_id, tool, claimer, state, int(expires_ms),
                 int(lease_ms), continuation, call)  # fmt: skip


def claimed_call(session_id: str, document: str) -> TrackedCall:
    try:
        return TrackedCall.model_validate_json(document)
    except ValidationError as exc:
        raise StoreError(f"cannot read a call of session {session_id}: {exc}") from None
