"""Built-in tools: Python functions the runtime runs in-process, registered by name.

An agent file names a `builtin` tool by its `name`; `register` adds one (library users add
their own). The built-ins are the demo's: `fetch_local` reads a small local catalogue and
`echo` returns its arguments. A tool function takes the arguments (already validated
against the tool's JSON Schema) and returns text or any JSON value; raising `ToolFailure`
fails the call with a message the model sees.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

ToolFunction = Callable[[dict[str, Any]], Any | Awaitable[Any]]

_REGISTRY: dict[str, ToolFunction] = {}


class ToolFailure(Exception):
    """A tool's own, expected failure; `retryable` says whether trying again can help."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


def register(name: str) -> Callable[[ToolFunction], ToolFunction]:
    def add(function: ToolFunction) -> ToolFunction:
        _REGISTRY[name] = function
        return function

    return add


def lookup(name: str) -> ToolFunction | None:
    return _REGISTRY.get(name)


#: What `fetch_local` knows: a stand-in for data that lives on this machine.
LOCAL_CATALOGUE = {
    "inventory": {"widgets": 42, "gadgets": 7},
    "weather": {"city": "Lyon", "celsius": 18},
}


@register("fetch_local")
def fetch_local(arguments: dict[str, Any]) -> Any:
    key = arguments["key"]
    if key not in LOCAL_CATALOGUE:
        raise ToolFailure(f"no local record {key!r}; known: {', '.join(sorted(LOCAL_CATALOGUE))}")
    return {"key": key, "value": LOCAL_CATALOGUE[key]}


@register("echo")
def echo(arguments: dict[str, Any]) -> Any:
    return arguments


__all__ = ["LOCAL_CATALOGUE", "ToolFailure", "ToolFunction", "lookup", "register"]
