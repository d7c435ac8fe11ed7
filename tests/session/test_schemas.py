"""Arguments checked against a tool's schema with a validator compiled once per schema."""

from __future__ import annotations

import pytest
from jsonschema.validators import Draft202012Validator

from runner.session.schemas import InvalidSchema, argument_error

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
          "required": ["n"]}  # fmt: skip


def test_errors_say_where_and_why():
    assert argument_error(SCHEMA, {"n": 3}) is None
    assert argument_error(SCHEMA, {"n": 0}) == "n: 0 is less than the minimum of 1"
    assert argument_error(SCHEMA, {}) == "(arguments): 'n' is a required property"


def test_the_schema_is_checked_once_however_many_calls(monkeypatch):
    checks = []
    original = Draft202012Validator.check_schema.__func__

    def counted(cls, schema, *args, **kwargs):
        checks.append(schema)
        return original(cls, schema, *args, **kwargs)

    monkeypatch.setattr(Draft202012Validator, "check_schema", classmethod(counted))
    schema = {"type": "object", "properties": {"s": {"type": "string"}}}
    for value in ("a", "b", 3):
        argument_error(schema, {"s": value})
    assert checks == [schema]
    argument_error(dict(schema), {"s": "c"})  # another schema object: its own check
    assert len(checks) == 2


def test_an_invalid_schema_is_refused_each_time_it_is_used():
    schema = {"type": "object", "properties": {"s": {"type": 5}}}
    for _ in range(2):
        with pytest.raises(InvalidSchema, match=r"^properties/s/type: 5 is not valid"):
            argument_error(schema, {"s": "x"})
