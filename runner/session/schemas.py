"""Checking a call's arguments against its tool's JSON Schema, with the schema's validator
compiled once by its owner.

`jsonschema.validate` checks the schema itself against the metaschema and builds a new
validator on every call, which cost more than the rest of an in-process call; here the
schema is checked once and its validator kept by the tool definition that holds the
schema (`ToolSpec.arguments_check`, for the agent's lifetime: an agent is frozen), so no
cache outlives or outgrows the agents that use it. The messages are
`jsonschema.validate`'s: the best-matching error, with where in the arguments it is.
"""

from __future__ import annotations

from typing import Any

import jsonschema
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for


class InvalidSchema(ValueError):
    """The tool's parameters are not a valid JSON Schema; the message says where."""


#: A schema compiled: its validator, or why the schema itself is not valid.
Compiled = Validator | InvalidSchema


def compile_schema(schema: dict[str, Any]) -> Compiled:
    """`schema` checked against its metaschema once and compiled (never raises: an
    invalid schema is kept as its InvalidSchema, raised by each use)."""
    cls = validator_for(schema)  # its $schema's draft, else the latest (2020-12)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(schema)"
        return InvalidSchema(f"{where}: {exc.message}")
    validator: Validator = cls(schema)
    return validator


def argument_error(compiled: Compiled, arguments: Any) -> str | None:
    """What is wrong with `arguments` under the `compiled` schema (`where: why`), or None
    when they fit. InvalidSchema if the schema itself is not valid."""
    if isinstance(compiled, InvalidSchema):
        raise compiled
    error = best_match(compiled.iter_errors(arguments))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
    return f"{where}: {error.message}"
