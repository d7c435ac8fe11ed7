"""Arguments checked against a tool's schema with a validator compiled once per schema
(by the tool definition that holds it)."""

from __future__ import annotations

import pytest
from jsonschema.validators import Draft202012Validator

from runner.session import ToolSpec
from runner.session.schemas import InvalidSchema, argument_error, compile_schema

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
          "required": ["n"]}  # fmt: skip


def test_errors_say_where_and_why():
    compiled = compile_schema(SCHEMA)
    assert argument_error(compiled, {"n": 3}) is None
    assert argument_error(compiled, {"n": 0}) == "n: 0 is less than the minimum of 1"
    assert argument_error(compiled, {}) == "(arguments): 'n' is a required property"


def test_the_schema_is_checked_once_however_many_calls(monkeypatch):
    checks = []
    original = Draft202012Validator.check_schema.__func__

    def counted(cls, schema, *args, **kwargs):
        checks.append(schema)
        return original(cls, schema, *args, **kwargs)

    monkeypatch.setattr(Draft202012Validator, "check_schema", classmethod(counted))
    schema = {"type": "object", "properties": {"s": {"type": "string"}}}
    tool = ToolSpec(name="t", parameters=schema)
    for value in ("a", "b", 3):
        argument_error(tool.arguments_check, {"s": value})
    assert checks == [schema]
    again = ToolSpec(name="t", parameters=dict(schema))  # another definition: its own check
    argument_error(again.arguments_check, {"s": "c"})
    assert len(checks) == 2
    changed = tool.model_copy(update={"parameters": {"type": "object"}})  # a change: its own
    argument_error(changed.arguments_check, {"s": "c"})
    assert len(checks) == 3


def test_an_invalid_schema_is_refused_each_time_it_is_used():
    tool = ToolSpec(name="t", parameters={"type": "object", "properties": {"s": {"type": 5}}})
    for _ in range(2):
        with pytest.raises(InvalidSchema, match=r"^properties/s/type: 5 is not valid"):
            argument_error(tool.arguments_check, {"s": "x"})
