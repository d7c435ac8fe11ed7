"""Checking a call's arguments against its tool's JSON Schema, with validators compiled
once per schema.

`jsonschema.validate` checks the schema itself against the metaschema and builds a new
validator on every call, which cost more than the rest of an in-process call; here the
schema is checked once and its validator kept (keyed by the schema object, which the
agent definition holds for its lifetime: an agent is frozen). The messages are
`jsonschema.validate`'s: the best-matching error, with where in the arguments it is.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

#: Schemas whose validator is kept (least recently used ones are dropped).
VALIDATOR_CACHE_SIZE = 512


class InvalidSchema(ValueError):
    """The tool's parameters are not a valid JSON Schema; the message says where."""


class _Validators:
    """Compiled validators by schema object. The entry keeps the schema alive, so its
    `id` cannot be reused by another object while the entry exists."""

    def __init__(self, size: int) -> None:
        self._entries: OrderedDict[int, tuple[dict[str, Any], Validator | InvalidSchema]] = (
            OrderedDict()
        )
        self._size = size
        self._lock = threading.Lock()

    def get(self, schema: dict[str, Any]) -> Validator:
        key = id(schema)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is schema:
                self._entries.move_to_end(key)
                return _raise_or(entry[1])
        compiled = _compile(schema)  # outside the lock: a first check can take a while
        with self._lock:
            self._entries[key] = (schema, compiled)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return _raise_or(compiled)


def _compile(schema: dict[str, Any]) -> Validator | InvalidSchema:
    cls = validator_for(schema)  # its $schema's draft, else the latest (2020-12)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(schema)"
        return InvalidSchema(f"{where}: {exc.message}")
    validator: Validator = cls(schema)
    return validator


def _raise_or(compiled: Validator | InvalidSchema) -> Validator:
    if isinstance(compiled, InvalidSchema):
        raise compiled
    return compiled


_VALIDATORS = _Validators(VALIDATOR_CACHE_SIZE)


def argument_error(schema: dict[str, Any], arguments: Any) -> str | None:
    """What is wrong with `arguments` under `schema` (`where: why`), or None when they
    fit. InvalidSchema if the schema itself is not valid."""
    error = best_match(_VALIDATORS.get(schema).iter_errors(arguments))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
    return f"{where}: {error.message}"
