"""The built-in tools of the demo: `fetch_local` reads a small local catalogue and `echo`
returns its arguments. `default_tools()` is a fresh registry holding them. Both are
`async def` although they never await: they never block either, so they run on the loop
instead of paying a worker-thread hand-off per call."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from runner.tools.registry import ToolFailure, ToolRegistry

#: What `fetch_local` knows: a stand-in for data that lives on this machine.
LOCAL_CATALOGUE = MappingProxyType({
    "inventory": MappingProxyType({"widgets": 42, "gadgets": 7}),
    "weather": MappingProxyType({"city": "Lyon", "celsius": 18}),
})  # fmt: skip


async def fetch_local(arguments: dict[str, Any]) -> Any:
    key = arguments["key"]
    if key not in LOCAL_CATALOGUE:
        raise ToolFailure(f"no local record {key!r}; known: {', '.join(sorted(LOCAL_CATALOGUE))}")
    return {"key": key, "value": dict(LOCAL_CATALOGUE[key])}  # a copy the caller may change


async def echo(arguments: dict[str, Any]) -> Any:
    return arguments


def default_tools() -> ToolRegistry:
    """A new registry with the built-ins; each call gives an independent one."""
    return ToolRegistry({"fetch_local": fetch_local, "echo": echo})
