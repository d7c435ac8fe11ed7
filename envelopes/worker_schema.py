"""Tool input schemas compiled to plain Python checks, for a worker that starts fast.

`compile_schema(schema)` returns a function `value -> bool` that gives exactly the answer
of `jsonschema.Draft202012Validator(schema).is_valid(value)`, or None when the schema
uses anything outside a small, common subset (then the worker uses jsonschema itself).
It also returns None for a schema it cannot prove well formed, so that `check_schema`
still reports it. Only validity is computed here: the message for a refused value comes
from jsonschema's `best_match`, imported on that (rare) path only. Why not jsonschema
always: importing it and building a validator costs a fresh worker about 150 ms (it pulls
in referencing, rpds and attrs), this module about 0.5 ms, and a worker starts per call.

The subset: boolean schemas; `type` (one name or a list); `properties`, `required`,
`additionalProperties`; `items` (one schema), `minItems`, `maxItems`; `minLength`,
`maxLength`; `minimum`, `maximum`; `enum` and `const` of strings; and the annotations
`title`, `description`, `$comment`, `format` (not asserted by jsonschema's default
validator either), `default`, `examples`, `deprecated`, `readOnly`, `writeOnly`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Check = Callable[[Any], bool]

_TYPE_NAMES = frozenset(("null", "boolean", "object", "array", "number", "string", "integer"))
_STRING_ANNOTATIONS = ("title", "description", "$comment", "format")
_BOOL_ANNOTATIONS = ("deprecated", "readOnly", "writeOnly")


class _Unsupported(Exception):
    """The schema is outside the subset, or not provably well formed."""


def compile_schema(schema: object) -> Check | None:
    try:
        return _compile(schema)
    except _Unsupported:
        return None


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0


def _is_number(value: object) -> bool:
    return type(value) is int or type(value) is float


def _type_test(name: str) -> Check:
    """jsonschema's type checker for 2020-12: bool is neither integer nor number, and a
    float with no fractional part is an integer."""
    if name == "null":
        return lambda v: v is None
    if name == "boolean":
        return lambda v: v is True or v is False
    if name == "object":
        return lambda v: isinstance(v, dict)
    if name == "array":
        return lambda v: isinstance(v, list)
    if name == "string":
        return lambda v: isinstance(v, str)
    if name == "number":
        return lambda v: isinstance(v, int | float) and not isinstance(v, bool)
    return lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    )


def _one_of(accepted: frozenset[str]) -> Check:
    return lambda v: isinstance(v, str) and v in accepted


def _compile(schema: object) -> Check:
    if schema is True:
        return lambda v: True
    if schema is False:
        return lambda v: False
    if type(schema) is not dict:
        raise _Unsupported
    checks: list[Check] = []
    rest = dict(schema)
    for key in _STRING_ANNOTATIONS:
        if key in rest and not isinstance(rest.pop(key), str):
            raise _Unsupported
    for key in _BOOL_ANNOTATIONS:
        if key in rest and type(rest.pop(key)) is not bool:
            raise _Unsupported
    rest.pop("default", None)
    if "examples" in rest and type(rest.pop("examples")) is not list:
        raise _Unsupported

    if "type" in rest:
        names = rest.pop("type")
        listed = names if type(names) is list else [names]
        if (
            not listed
            or not all(isinstance(n, str) and n in _TYPE_NAMES for n in listed)
            or len(set(listed)) != len(listed)
        ):
            raise _Unsupported
        tests = [_type_test(name) for name in listed]
        checks.append(lambda v: any(test(v) for test in tests))

    for key, text in (("enum", True), ("const", False)):
        if key not in rest:
            continue
        allowed = rest.pop(key)
        values = allowed if text else [allowed]
        if (text and (type(allowed) is not list)) or not all(type(s) is str for s in values):
            raise _Unsupported
        checks.append(_one_of(frozenset(values)))

    string_bounds = [rest.pop(k, None) for k in ("minLength", "maxLength")]
    if any(b is not None and not _is_count(b) for b in string_bounds):
        raise _Unsupported
    low, high = string_bounds
    if low is not None or high is not None:
        lo, hi = low or 0, high

        def lengths(v: Any) -> bool:
            return not isinstance(v, str) or (lo <= len(v) and (hi is None or len(v) <= hi))

        checks.append(lengths)

    number_bounds = [rest.pop(k, None) for k in ("minimum", "maximum")]
    if any(b is not None and not _is_number(b) for b in number_bounds):
        raise _Unsupported
    minimum, maximum = number_bounds
    if minimum is not None or maximum is not None:

        def bounds(v: Any) -> bool:
            if not isinstance(v, int | float) or isinstance(v, bool):
                return True
            return (minimum is None or v >= minimum) and (maximum is None or v <= maximum)

        checks.append(bounds)

    item_bounds = [rest.pop(k, None) for k in ("minItems", "maxItems")]
    if any(b is not None and not _is_count(b) for b in item_bounds):
        raise _Unsupported
    fewest, most = item_bounds
    item_check = _compile(rest.pop("items")) if "items" in rest else None
    if fewest is not None or most is not None or item_check is not None:
        least = fewest or 0

        def array(v: Any) -> bool:
            if not isinstance(v, list):
                return True
            if len(v) < least or (most is not None and len(v) > most):
                return False
            return item_check is None or all(item_check(item) for item in v)

        checks.append(array)

    checks.extend(_object_check(rest))
    if rest:  # a keyword outside the subset (or an unknown one): jsonschema decides
        raise _Unsupported
    if len(checks) == 1:
        return checks[0]
    return lambda v: all(check(v) for check in checks)


def _object_check(rest: dict[str, Any]) -> list[Check]:
    properties = rest.pop("properties", None)
    required = rest.pop("required", None)
    has_additional = "additionalProperties" in rest
    additional = rest.pop("additionalProperties", None)
    if properties is None and required is None and not has_additional:
        return []
    if properties is not None and type(properties) is not dict:
        raise _Unsupported
    props = {name: _compile(sub) for name, sub in (properties or {}).items()}
    if required is not None and (
        type(required) is not list
        or not all(type(name) is str for name in required)
        or len(set(required)) != len(required)
    ):
        raise _Unsupported
    needed = tuple(required or ())
    extra = _compile(additional) if has_additional else None

    def check(v: Any) -> bool:
        if not isinstance(v, dict):
            return True
        for name in needed:
            if name not in v:
                return False
        for name, value in v.items():
            sub = props.get(name)
            if sub is not None:
                if not sub(value):
                    return False
            elif extra is not None and not extra(value):
                return False
        return True

    return [check]
