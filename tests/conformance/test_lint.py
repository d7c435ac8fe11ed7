"""lint_schema: tool input schemas must be closed and bounded, refs local."""

from __future__ import annotations

import pytest

from runner.conformance import lint_schema

CLEAN = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "maxLength": 100},
        "mode": {"enum": ["a", "b"]},
        "tags": {"type": "array", "maxItems": 5, "items": {"type": "string", "maxLength": 9}},
        "opts": {"$ref": "#/$defs/opts"},
        "n": {"type": ["integer", "null"]},
    },
    "required": ["text"],
    "additionalProperties": False,
    "$defs": {"opts": {"type": "object", "properties": {}, "additionalProperties": False}},
}


def test_a_closed_bounded_schema_is_clean() -> None:
    assert lint_schema(CLEAN) == []


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "string", "maxLength": 3}, '#: the input schema must be {"type": "object"'),
        ({"type": "object", "properties": {}}, "#: object not closed"),
        ({"type": "object", "additionalProperties": True}, "#: object not closed"),
        ({"type": "object", "additionalProperties": {"type": "integer"}}, "without maxProperties"),
        (
            {**CLEAN, "properties": {"s": {"type": "string"}}},
            "#/properties/s: string without maxLength",
        ),
        (
            {**CLEAN, "properties": {"a": {"type": "array", "items": {"type": "integer"}}}},
            "#/properties/a: array without maxItems",
        ),
        (
            {
                **CLEAN,
                "properties": {"a": {"type": "array", "maxItems": 2, "items": {"type": "string"}}},
            },
            "#/properties/a/items: string without maxLength",
        ),
        ({**CLEAN, "properties": {"x": {"description": "anything"}}}, "#/properties/x: no type"),
        (
            {**CLEAN, "properties": {"r": {"$ref": "https://example.com/s.json"}}},
            "points outside the schema",
        ),
        (
            {**CLEAN, "properties": {"u": {"anyOf": [{"type": "string"}, {"type": "null"}]}}},
            "#/properties/u/anyOf/0: string without maxLength",
        ),
    ],
)
def test_each_gap_is_named_with_its_path(schema: dict, problem: str) -> None:
    problems = lint_schema(schema)
    assert any(problem in p for p in problems), problems
