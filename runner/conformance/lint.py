"""Lint a tool's input_schema: every value the model can send must be closed and bounded.

A schema is what stands between the model's output and the worker. The rules: every
object is closed (`additionalProperties: false`, or a schema plus `maxProperties`), every
string has `maxLength` (or an `enum`/`const`), every array has `maxItems`, every
subschema says what it accepts (no bare `{}`), and `$ref` stays inside the document.
"""

from __future__ import annotations

from typing import Any

_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains",
               "propertyNames", "unevaluatedProperties", "unevaluatedItems")  # fmt: skip
_COMBINATORS = ("$ref", "allOf", "anyOf", "oneOf", "enum", "const", "not")


def lint_schema(schema: Any) -> list[str]:
    """Problems found, each as `path: what is wrong`; empty when the schema is clean."""
    problems: list[str] = []
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return ['#: the input schema must be {"type": "object", ...}']
    stack: list[tuple[Any, str]] = [(schema, "#")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, bool):
            if node is True and not path.endswith(("/not", "/else", "/then", "/if")):
                problems.append(f"{path}: `true` accepts any value")
            continue
        if not isinstance(node, dict):
            problems.append(f"{path}: not a schema")
            continue
        problems.extend(f"{path}: {p}" for p in _node_problems(node))
        for key in _SUBSCHEMA_MAPS:
            for name, child in (node.get(key) or {}).items():
                stack.append((child, f"{path}/{key}/{name}"))
        for key in _SUBSCHEMA_LISTS:
            for index, child in enumerate(node.get(key) or []):
                stack.append((child, f"{path}/{key}/{index}"))
        for key in _SUBSCHEMAS:
            child = node.get(key)
            if isinstance(child, dict) or (key == "items" and child is True):
                stack.append((child, f"{path}/{key}"))
    return sorted(problems)


def _types(node: dict[str, Any]) -> set[str]:
    declared = node.get("type")
    if isinstance(declared, str):
        return {declared}
    return set(declared) if isinstance(declared, list) else set()


def _node_problems(node: dict[str, Any]) -> list[str]:
    problems = []
    ref = node.get("$ref")
    if isinstance(ref, str) and not ref.startswith("#"):
        problems.append(f"$ref {ref[:80]!r} points outside the schema (remote refs are refused)")
    types = _types(node)
    if not types and not any(key in node for key in _COMBINATORS):
        problems.append("no type, enum, const or combinator: it accepts any value")
    fixed = "enum" in node or "const" in node
    if "string" in types and "maxLength" not in node and not fixed:
        problems.append("string without maxLength")
    if "array" in types and "maxItems" not in node and not fixed:
        problems.append("array without maxItems")
    if "object" in types and not fixed:
        extra = node.get("additionalProperties", node.get("unevaluatedProperties"))
        if extra is None or extra is True:
            problems.append("object not closed (set additionalProperties: false)")
        elif extra is not False and "maxProperties" not in node:
            problems.append("open-ended object (additionalProperties schema) without maxProperties")
    return problems
