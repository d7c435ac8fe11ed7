"""Strict JSON in and out: the only way bytes from the other side become Python values.

Everything a worker sends is untrusted. Before any schema looks at it, this module makes
sure it is exactly one JSON document that every mainstream parser reads the same way:
a byte cap checked before parsing, UTF-8 without a BOM, no duplicate keys, no NaN or
Infinity, no lone surrogates, integers that survive an IEEE double, bounded nesting and
nothing after the document but whitespace. A parser differential (two parsers reading one
payload differently) is how envelopes get smuggled past reviewers; this closes them.

Only the standard library is used here, so any worker can vendor this file.
"""

from __future__ import annotations

import json
import math
from typing import Any

#: Deepest nesting of arrays and objects accepted in a document (the envelope itself
#: uses four levels; tool arguments and JSON output get the rest).
MAX_DEPTH = 64

#: Integers outside +-(2^53 - 1) lose precision in JavaScript and other double-based
#: parsers, so they are refused rather than silently read differently.
MAX_SAFE_INTEGER = 2**53 - 1

_BOM = b"\xef\xbb\xbf"


class WireError(ValueError):
    """The bytes are not one acceptable JSON document. `reason` says what and where."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Reject(ValueError):
    """Raised by parse hooks; turned into a WireError with a position by `loads`."""


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _Reject(f"duplicate key {key!r} in an object")
        obj[key] = value
    return obj


def _reject_constant(name: str) -> Any:
    raise _Reject(f"{name} is not valid JSON (non-finite numbers are refused)")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > 16:  # cheaper than int() on a megabyte of digits
        raise _Reject(f"integer {text[:24]}... is outside +-(2^53-1)")
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise _Reject(f"integer {text} is outside +-(2^53-1)")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Reject(f"number {text[:24]} overflows a double")
    return value


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs_without_duplicates,
    parse_constant=_reject_constant,
    parse_int=_parse_int,
    parse_float=_parse_float,
)


def _check_tree(value: Any, max_depth: int) -> None:
    """Depth bound and lone surrogates, checked without recursion."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "$")]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, str):
            _check_text(node, path)
        elif isinstance(node, dict):
            if depth > max_depth:
                raise WireError(f"nesting deeper than {max_depth} levels at {path}")
            for key, child in node.items():
                _check_text(key, f"{path} (a key)")
                stack.append((child, depth + 1, f"{path}.{key[:40]}"))
        elif isinstance(node, list):
            if depth > max_depth:
                raise WireError(f"nesting deeper than {max_depth} levels at {path}")
            for index, child in enumerate(node):
                stack.append((child, depth + 1, f"{path}[{index}]"))


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise WireError(
            f"lone surrogate (\\u{ord(text[exc.start]):04x}) in a string at {path}"
        ) from None


def loads(data: bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """Parse exactly one JSON object from `data`, refusing anything ambiguous.

    Raises WireError with a one-line reason naming the problem and its position.
    """
    if len(data) > max_bytes:
        raise WireError(f"document is {len(data)} bytes, over the cap of {max_bytes}")
    if not data.strip():
        raise WireError("empty input: expected one JSON object")
    if data.startswith(_BOM):
        raise WireError("input starts with a byte order mark; send plain UTF-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError(f"invalid UTF-8 at byte {exc.start}") from None
    try:
        value, end = _DECODER.raw_decode(text, _skip_whitespace(text, 0))
    except _Reject as exc:
        raise WireError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise WireError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise WireError(f"nesting deeper than {max_depth} levels") from None
    rest = _skip_whitespace(text, end)
    if rest != len(text):
        raise WireError(f"trailing data after the JSON document at character {rest}")
    if not isinstance(value, dict):
        raise WireError(f"expected a JSON object, got {type(value).__name__}")
    _check_tree(value, max_depth)
    return value


def _skip_whitespace(text: str, index: int) -> int:
    length = len(text)
    while index < length and text[index] in " \t\n\r":
        index += 1
    return index


def dumps(value: Any) -> bytes:
    """Serialize for the wire: compact UTF-8, no NaN, lone surrogates refused."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8")
    except (ValueError, UnicodeEncodeError) as exc:
        raise WireError(f"cannot serialize: {exc}") from None
