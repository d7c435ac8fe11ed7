"""Tool registries: each runtime or test owns one; sync tools run off the event loop."""

from __future__ import annotations

import inspect
import threading

import anyio
import anyio.lowlevel
import pytest

from runner.tools import (
    LOCAL_CATALOGUE,
    DuplicateToolError,
    ToolFailure,
    ToolRegistry,
    default_tools,
    invoke,
)


def shout(arguments: dict) -> str:
    return str(arguments["text"]).upper()


def test_the_default_registry_holds_the_built_ins():
    registry = default_tools()
    assert registry.names() == ("echo", "fetch_local") and len(registry) == 2
    assert "echo" in registry and registry.lookup("nothing") is None
    fetch_local = registry.lookup("fetch_local")
    assert anyio.run(invoke, fetch_local, {"key": "weather"}) == {
        "key": "weather",
        "value": LOCAL_CATALOGUE["weather"],
    }
    with pytest.raises(ToolFailure, match="no local record 'moon'; known: inventory, weather"):
        anyio.run(invoke, fetch_local, {"key": "moon"})
    assert anyio.run(invoke, registry.lookup("echo"), {"a": 1}) == {"a": 1}


def test_the_built_ins_are_coroutines_so_they_run_on_the_loop_without_a_thread():
    # They never block, so a thread hand-off (tens of microseconds) would be pure cost.
    for name in ("echo", "fetch_local"):
        assert inspect.iscoroutinefunction(default_tools().lookup(name))


def test_registries_are_independent_of_each_other_and_of_the_default():
    mine, theirs = default_tools(), default_tools()
    mine.add("shout", shout)
    assert mine.lookup("shout") is shout
    assert theirs.lookup("shout") is None and default_tools().lookup("shout") is None


def test_copy_and_with_tools_derive_without_touching_the_original():
    base = default_tools()
    derived = base.with_tools({"shout": shout})
    copied = base.copy()
    copied.register("later")(shout)
    assert derived.names() == ("echo", "fetch_local", "shout")
    assert copied.names() == ("echo", "fetch_local", "later")
    assert base.names() == ("echo", "fetch_local")


def test_a_taken_name_is_refused_unless_replace_is_asked_for():
    registry = default_tools()
    with pytest.raises(DuplicateToolError, match="'echo' is already registered; pass replace=True"):
        registry.add("echo", shout)
    with pytest.raises(DuplicateToolError):
        registry.with_tools({"echo": shout})
    with pytest.raises(DuplicateToolError):
        registry.register("echo")(shout)
    assert registry.lookup("echo") is not shout
    registry.add("echo", shout, replace=True)
    assert registry.lookup("echo") is shout
    assert registry.with_tools({"fetch_local": shout}, replace=True).lookup("fetch_local") is shout


def test_names_an_agent_file_could_not_use_and_non_callables_are_refused():
    with pytest.raises(ValueError, match="tool name '9lives' is not valid"):
        ToolRegistry().add("9lives", shout)
    with pytest.raises(TypeError, match="expected a callable, got str"):
        ToolRegistry().add("fine", "not a function")  # type: ignore[arg-type]


def test_the_decorator_returns_the_function_unchanged():
    registry = ToolRegistry()

    @registry.register("shout_too")
    def shout_too(arguments: dict) -> str:
        return "!"

    assert registry.lookup("shout_too") is shout_too and shout_too({}) == "!"


def test_a_synchronous_tool_runs_in_a_worker_thread_not_on_the_event_loop():
    seen: dict[str, int] = {}

    def where(arguments: dict) -> str:
        seen["tool"] = threading.get_ident()
        return "done"

    async def main():
        seen["loop"] = threading.get_ident()
        return await invoke(where, {})

    assert anyio.run(main) == "done"
    assert seen["tool"] != seen["loop"]


def test_a_blocking_tool_leaves_the_event_loop_free():
    released = threading.Event()

    def blocks_until_released(arguments: dict) -> str:
        # On the event loop this would deadlock: the task that releases it could not run.
        if not released.wait(timeout=10):
            raise TimeoutError("the event loop was blocked")
        return "released"

    async def main():
        async with anyio.create_task_group() as group:
            group.start_soon(release_soon)
            with anyio.fail_after(10):
                return await invoke(blocks_until_released, {})

    async def release_soon():
        await anyio.lowlevel.checkpoint()
        released.set()

    assert anyio.run(main) == "released"


def test_coroutine_tools_are_awaited_on_the_event_loop():
    class Counter:
        def __init__(self) -> None:
            self.threads: list[int] = []

        async def __call__(self, arguments: dict) -> int:
            self.threads.append(threading.get_ident())
            await anyio.lowlevel.checkpoint()
            return arguments["n"] + 1

    async def double(arguments: dict) -> int:
        await anyio.lowlevel.checkpoint()
        return arguments["n"] * 2

    counter = Counter()

    async def main():
        loop = threading.get_ident()
        results = await invoke(double, {"n": 4}), await invoke(counter, {"n": 4})
        assert counter.threads == [loop]
        return results

    assert anyio.run(main) == (8, 5)


def test_a_tools_exceptions_propagate_unchanged():
    def fails(arguments: dict) -> str:
        raise ToolFailure("not today", retryable=True)

    async def also_fails(arguments: dict) -> str:
        raise KeyError("missing")

    with pytest.raises(ToolFailure, match="not today") as caught:
        anyio.run(invoke, fails, {})
    assert caught.value.retryable
    with pytest.raises(KeyError):
        anyio.run(invoke, also_fails, {})
