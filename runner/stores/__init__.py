"""Stores: where sessions, continuation tokens and cached tool results live.

base.py states the interfaces and the compare-and-set rule; sqlite.py is the embedded
default (one WAL file, numbered migrations); files.py keeps sessions as JSON files;
composite.py reads through a list of stores and writes to the first.
"""

# The stores keep session models, and the session package uses the stores: loading it
# first lets `import runner.stores` work on its own (else the import cycle breaks it).
import runner.session  # noqa: F401  isort: skip
from runner.stores.base import (
    Continuation,
    ContinuationStore,
    SessionNotFound,
    SessionStore,
    SessionSummary,
    StoreError,
    ToolCache,
    VersionConflict,
    cache_key,
)
from runner.stores.composite import CompositeStore
from runner.stores.files import FileSessionStore
from runner.stores.sqlite import SQLiteStore

__all__ = [
    "CompositeStore",
    "Continuation",
    "ContinuationStore",
    "FileSessionStore",
    "SQLiteStore",
    "SessionNotFound",
    "SessionStore",
    "SessionSummary",
    "StoreError",
    "ToolCache",
    "VersionConflict",
    "cache_key",
]
