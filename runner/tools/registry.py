"""A registry of built-in tools, owned by the runtime that runs them.

A `ToolRegistry` maps a tool name (as an agent file's `builtin` tool names it) to a Python
function. There is no module-global registry: a runtime is given one (by default
`runner.tools.default_tools()`, a fresh registry of the built-ins), a test derives its own
with `copy()` or `with_tools(...)`, and neither can leak into the other. Adding a name that
is already there is refused unless `replace=True`, so two tools never silently share a name.

`invoke(function, arguments)` runs one function to its value: a coroutine function is
awaited; a synchronous one runs in a worker thread, never on the event loop, so a slow or
blocking tool cannot starve lease renewal or other sessions. Whatever the function raises
propagates unchanged; turning it into a call's result (`ToolFailure` -> TOOL_FAILED, any
other exception -> INTERNAL) is the engine's job.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar

import anyio
import anyio.to_thread

#: A tool: takes the arguments (already checked against the tool's JSON Schema) and returns
#: text or any JSON value, directly or from a coroutine.
ToolFunction = Callable[[dict[str, Any]], Any | Awaitable[Any]]

F = TypeVar("F", bound=Callable[[dict[str, Any]], Any])

#: The names an agent file can give a tool (the same rule as `ToolSpec.name`).
TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


class ToolFailure(Exception):
    """A tool's own, expected failure; `retryable` says whether trying again can help."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class DuplicateToolError(ValueError):
    """A name registered twice without `replace=True`."""


class ToolRegistry:
    """Built-in tools by name. Mutate it while setting a runtime up, not while it runs."""

    def __init__(self, tools: Mapping[str, ToolFunction] | None = None) -> None:
        self._tools: dict[str, ToolFunction] = {}
        for name, function in (tools or {}).items():
            self.add(name, function)

    def add(self, name: str, function: ToolFunction, *, replace: bool = False) -> None:
        """Register `function` as tool `name`; a taken name is refused unless `replace`."""
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise ValueError(
                f"tool name {name!r} is not valid: a letter, then up to 63 letters,"
                " digits, '_', '.' or '-'"
            )
        if not callable(function):
            raise TypeError(f"tool {name!r}: expected a callable, got {type(function).__name__}")
        if name in self._tools and not replace:
            raise DuplicateToolError(
                f"a tool named {name!r} is already registered; pass replace=True to replace it"
            )
        self._tools[name] = function

    def register(self, name: str, *, replace: bool = False) -> Callable[[F], F]:
        """Decorator form of `add`: `@registry.register("name")`; returns the function."""

        def decorate(function: F) -> F:
            self.add(name, function, replace=replace)
            return function

        return decorate

    def lookup(self, name: str) -> ToolFunction | None:
        return self._tools.get(name)

    def names(self) -> tuple[str, ...]:
        """The registered names, sorted."""
        return tuple(sorted(self._tools))

    def copy(self) -> ToolRegistry:
        """An independent registry with the same tools; changing one leaves the other."""
        return ToolRegistry(self._tools)

    def with_tools(
        self, tools: Mapping[str, ToolFunction], *, replace: bool = False
    ) -> ToolRegistry:
        """A copy with `tools` added (refusing taken names unless `replace`); `self` is
        left as it was."""
        derived = self.copy()
        for name, function in tools.items():
            derived.add(name, function, replace=replace)
        return derived

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({', '.join(self.names())})"


async def invoke(
    function: ToolFunction,
    arguments: dict[str, Any],
    *,
    limiter: anyio.CapacityLimiter | None = None,
) -> Any:
    """Run a tool function to its value: awaited if it is a coroutine function, else in a
    worker thread (bounded by `limiter`, anyio's default one if None). A synchronous
    function that returns an awaitable has it awaited on the loop. Exceptions propagate.

    Cancelling waits for a running thread to finish (a thread cannot be interrupted), so a
    timeout around a blocking tool fires only when the tool returns."""
    if _is_coroutine_function(function):
        return await function(arguments)
    value = await anyio.to_thread.run_sync(function, arguments, limiter=limiter)
    if inspect.isawaitable(value):
        value = await value
    return value


def _is_coroutine_function(function: object) -> bool:
    """True for `async def` functions, and for objects whose `__call__` is one."""
    if inspect.iscoroutinefunction(function):
        return True
    call = getattr(type(function), "__call__", None)  # noqa: B004 - the method, not callable()
    return call is not None and inspect.iscoroutinefunction(call)
