"""Built-in tools: Python functions the runtime runs in-process, looked up by name in the
`ToolRegistry` the runtime was given.

An agent file names a `builtin` tool by its `name`. `default_tools()` returns a fresh
registry with the demo's built-ins (`fetch_local`, `echo`); library users and tests derive
their own (`default_tools().with_tools({"mine": fn})`, or `registry.register("mine")`)
without touching anyone else's. A tool function takes the arguments (already validated
against the tool's JSON Schema) and returns text or any JSON value; raising `ToolFailure`
fails the call with a message the model sees. `invoke` runs one: coroutine functions are
awaited, synchronous ones run in a worker thread.
"""

from __future__ import annotations

from runner.tools.builtin import LOCAL_CATALOGUE, default_tools, echo, fetch_local
from runner.tools.registry import (
    DuplicateToolError,
    ToolFailure,
    ToolFunction,
    ToolRegistry,
    invoke,
)

__all__ = [
    "LOCAL_CATALOGUE",
    "DuplicateToolError",
    "ToolFailure",
    "ToolFunction",
    "ToolRegistry",
    "default_tools",
    "echo",
    "fetch_local",
    "invoke",
]
