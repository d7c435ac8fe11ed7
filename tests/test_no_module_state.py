"""No module-level mutable state in `runner` or `envelopes` (issue 25): what a process
shares lives in objects their owner builds and passes (runner.isolation's RunnerCaches,
the session engine's caches), so two engines in one process share nothing by accident
and every cache has an owner who bounds it.

The rule, for every module of both packages (each imported, `__main__` aside):
1. A name bound at module level (an assignment in the module's own source) holds an
   immutable value: None, a bool, number, str or bytes; a tuple or frozenset of
   immutable values; a `types.MappingProxyType` whose keys and values are immutable; an
   enum member, a compiled regex, a path; a class, function or module; a typing
   construct; a frozen dataclass whose fields are immutable; an object with no instance
   state at all (`__slots__ = ()` all the way up). Constant tables are written as
   MappingProxyType, tuple or frozenset, never dict, list or set.
2. A few kinds are declarations, not state, and are allowed by name below (KINDS): a
   named logger (the logging system's), the command and route tables the front doors
   build by decorators at import, compiled validators (pydantic's TypeAdapter, a JSON
   Schema type checker, CPython's JSON scanner).
3. No function rebinds a module-level name (`global`).
4. A function cached with functools (`@cache`, `@lru_cache`) takes no argument: a lazy
   constant. One that takes arguments is a memo with no owner and no bound.

A failure names the module, the attribute and the kind of value.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import importlib
import inspect
import logging
import pkgutil
import re
import types
from collections.abc import Iterator
from pathlib import Path, PurePath

import envelopes
import runner

#: Kinds that are declarations, not state (rule 2), by "module.qualname" of their type.
KINDS = {
    "logging.Logger": "a named logger: the logging system's, configured by the process",
    "typer.main.Typer": "a command table, built by decorators at import",
    "fastapi.routing.APIRouter": "a route table, built by decorators at import",
    "pydantic.type_adapter.TypeAdapter": "a compiled validator",
    "jsonschema._types.TypeChecker": "a JSON Schema type checker (immutable)",
    "_json.Scanner": "CPython's compiled JSON scanner (immutable)",
}

#: The one piece of process state kept on purpose, with why.
INTENDED = {
    # A crash point's `name@N` counts passes in this process: the crash matrix's test
    # seam (AGENTS_RUNNER_CRASH_AT), which only the crash-matrix tests turn on.
    ("runner.faults", "_passes"),
}

_IMMUTABLE_KINDS = (
    type(None), bool, int, float, complex, str, bytes, range, type(Ellipsis),  # scalars
    type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType,  # definitions
    types.MethodType, functools.partial,
    types.GenericAlias, types.UnionType,  # typing
    enum.Enum, re.Pattern, PurePath,
)  # fmt: skip


def type_name(value: object) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def stateless(value: object) -> bool:
    """No instance state: every class up the MRO (object aside) declares `__slots__ = ()`
    (a builtin container declares none: it is not stateless)."""
    return all(cls.__dict__.get("__slots__", None) == () for cls in type(value).__mro__[:-1])


def immutable(value: object, depth: int = 0) -> bool:
    """Whether `value` is of a kind rule 1 allows (recursively, for containers)."""
    if depth > 20:
        return False
    if isinstance(value, _IMMUTABLE_KINDS):
        return True
    if type(value).__module__ in ("typing", "typing_extensions"):
        return True  # TypeVar, ParamSpec, Annotated[...], Literal[...], aliases
    if isinstance(value, tuple | frozenset):
        return all(immutable(item, depth + 1) for item in value)
    if isinstance(value, types.MappingProxyType):
        return all(immutable(k, depth + 1) and immutable(v, depth + 1) for k, v in value.items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = getattr(type(value), "__dataclass_params__", None)
        return bool(params and params.frozen) and all(
            immutable(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)
        )
    return stateless(value)


def modules() -> Iterator[types.ModuleType]:
    for package in (runner, envelopes):
        yield package
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.rsplit(".", 1)[-1] != "__main__":  # running it is not importing it
                yield importlib.import_module(info.name)


def bound_at_module_level(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names - {"__all__"}


def problems_of(module: types.ModuleType) -> Iterator[tuple[str, str]]:
    """(attribute, what is wrong) for each breach of the rule in `module`."""
    source = Path(module.__file__ or "")
    if source.suffix != ".py":
        return
    tree = ast.parse(source.read_text(), str(source))
    for name in sorted(bound_at_module_level(tree)):
        value = getattr(module, name)
        if type_name(value) not in KINDS and not immutable(value):
            yield name, f"a module-level {type_name(value)}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            for name in node.names:
                yield name, "rebound by a function (`global`)"
    for name, value in vars(module).items():
        wrapped = getattr(value, "__wrapped__", None)
        if (
            hasattr(value, "cache_info")
            and getattr(value, "__module__", None) == module.__name__
            and wrapped is not None
            and inspect.signature(wrapped).parameters
        ):
            yield name, "a functools cache of a function with arguments (a memo no one owns)"


def breaches() -> dict[tuple[str, str], str]:
    found = {}
    for module in modules():
        for name, problem in problems_of(module):
            found[(module.__name__, name)] = problem
    return found


def test_no_module_holds_mutable_state() -> None:
    found = breaches()
    unexpected = {key: why for key, why in found.items() if key not in INTENDED}
    assert not unexpected, "module-level state (issue 25: pass an owned object instead):\n" + (
        "\n".join(f"  {module}.{name}: {why}" for (module, name), why in sorted(unexpected.items()))
    )


def test_the_intended_list_holds_only_what_still_breaks_the_rule() -> None:
    found = breaches()
    gone = sorted(f"{module}.{name}" for module, name in INTENDED if (module, name) not in found)
    assert not gone, f"no longer module state: delete them from INTENDED: {gone}"


def test_the_rule_catches_what_it_says() -> None:
    """The rule itself, on values of each kind (so that an empty result means something)."""
    frozen_table = types.MappingProxyType({"a": (1, "b"), "c": frozenset({2})})
    for value in (None, 1, "x", (1, ("y",)), frozenset({1}), frozen_table, re.compile("a"),
                  Path("/"), logging.INFO, types.MappingProxyType({}), object()):  # fmt: skip
        assert immutable(value), value

    @dataclasses.dataclass
    class Loose:
        items: list[int]

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        items: tuple[int, ...]

    @dataclasses.dataclass(frozen=True)
    class FrozenOverAList:
        items: list[int]

    class Plain:
        pass

    assert immutable(Frozen((1,)))
    for value in ({}, [], set(), bytearray(), (1, []), types.MappingProxyType({"a": []}),
                  Loose([]), FrozenOverAList([]), Plain()):  # fmt: skip
        assert not immutable(value), value
