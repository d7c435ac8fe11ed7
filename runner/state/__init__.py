"""What a session is made of, as plain values, and how its states move.

models.py: sessions, turns, tracked calls and results (exact JSON round trips);
transitions.py: the tables of allowed state changes and the functions that apply them;
clock.py: the engine's injectable clock; events.py: the events a write makes (what the
stores' event log records); dispositions.py: a stored disposition's decorate, read once;
effects.py: what a call's effects imply after a crash. Nothing here does I/O or knows of
stores.
"""

from runner.state.clock import Clock, ManualClock, StoreAlignedClock, SystemClock
from runner.state.models import (
    CALL_STATES,
    SCHEMA_CHANGES,
    SESSION_SCHEMA_VERSION,
    SESSION_STATUSES,
    TERMINAL_STATES,
    UNKNOWN_OUTCOME,
    Attachment,
    CallEvent,
    CallOutput,
    CallState,
    HistoryNotLoaded,
    LlmTurn,
    PartialUserTurn,
    Session,
    SessionStatus,
    SessionT,
    SessionTail,
    ToolCall,
    ToolResult,
    ToolResultEntry,
    TrackedCall,
    Turn,
    UserTurn,
    load_document,
    migrate,
    new_token,
    now_ms,
    tail_from,
)
from runner.state.transitions import IllegalTransition

__all__ = [
    "CALL_STATES",
    "SCHEMA_CHANGES",
    "SESSION_SCHEMA_VERSION",
    "SESSION_STATUSES",
    "TERMINAL_STATES",
    "UNKNOWN_OUTCOME",
    "Attachment",
    "CallEvent",
    "CallOutput",
    "CallState",
    "Clock",
    "HistoryNotLoaded",
    "IllegalTransition",
    "LlmTurn",
    "ManualClock",
    "PartialUserTurn",
    "Session",
    "SessionStatus",
    "SessionT",
    "SessionTail",
    "StoreAlignedClock",
    "SystemClock",
    "ToolCall",
    "ToolResult",
    "ToolResultEntry",
    "TrackedCall",
    "Turn",
    "UserTurn",
    "load_document",
    "migrate",
    "new_token",
    "now_ms",
    "tail_from",
]
