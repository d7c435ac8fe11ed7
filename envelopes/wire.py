"""Strict JSON in and out: the only way bytes from the other side become Python values.

Everything a worker sends is untrusted. Before any schema looks at it, this module makes
sure it is exactly one JSON document that every mainstream parser reads the same way:
a byte cap checked before parsing, UTF-8 without a BOM, no duplicate keys, no NaN or
Infinity, no lone surrogates, integers that survive an IEEE double, bounded nesting and
nothing after the document but whitespace. A parser differential (two parsers reading one
payload differently) is how envelopes get smuggled past reviewers; this closes them.

Only the standard library is used here, so any worker can vendor this file. On CPython it
drives the `_json` accelerator (the very scanner and encoder `json` itself uses) without
importing the `json` package, whose import (and `re`'s) costs a fresh worker process more
CPU than everything else it does for a request; elsewhere it falls back to `json`.
"""

from __future__ import annotations

import math

#: typing itself costs a fresh process milliseconds; mypy reads this name as typing's.
TYPE_CHECKING = False
if TYPE_CHECKING:
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


class _ScanContext:
    """What the scanner reads off a json.JSONDecoder: the same hooks, strict strings."""

    strict = True
    object_hook = None
    object_pairs_hook = staticmethod(_pairs_without_duplicates)
    parse_float = staticmethod(_parse_float)
    parse_int = staticmethod(_parse_int)
    parse_constant = staticmethod(_reject_constant)


def _raise_unserializable(value: object) -> Any:
    # json.JSONEncoder.default's message, word for word.
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


_make_encoder: Any
try:
    # CPython's C accelerator, which the json package itself wraps: the same scanner and
    # encoder, without importing json's Python modules at every worker start (~1 ms).
    import _json  # noqa: PLC2701, RUF100  (PLC2701 runs only in scripts/test's preview pass)

    _encode_string: Any = _json.encode_basestring
    _make_encoder = _json.make_encoder
    _make_scanner: Any = _json.make_scanner
except ImportError:  # not CPython: the json package's pure-Python twins
    from json import encoder as _py_encoder
    from json import scanner as _py_scanner

    _encode_string = _py_encoder.py_encode_basestring
    _make_scanner = _py_scanner.py_make_scanner  # type: ignore[attr-defined]

    _make_encoder = None

_scan_once: Any = _make_scanner(_ScanContext())


def _scan(text: str, start: int) -> tuple[Any, int]:
    try:
        result: tuple[Any, int] = _scan_once(text, start)
    except SystemError:
        # The C scanner words its errors with json.decoder.JSONDecodeError, which it only
        # looks up among the modules already imported: import it and scan again.
        import json.decoder  # noqa: F401

        result = _scan_once(text, start)
    return result


def _json_error(message: str, text: str, pos: int) -> ValueError:
    from json import JSONDecodeError  # only on the way to an error

    return JSONDecodeError(message, text, pos)


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
        start = _skip_whitespace(text, 0)
        try:
            value, end = _scan(text, start)
        except StopIteration as stop:  # what json.JSONDecoder.raw_decode turns it into
            raise _json_error("Expecting value", text, stop.value) from None
    except _Reject as exc:
        raise WireError(str(exc)) from None
    except ValueError as exc:
        if not hasattr(exc, "lineno"):  # not the scanner's json.JSONDecodeError
            raise
        where = f"line {getattr(exc, 'lineno', 0)} column {getattr(exc, 'colno', 0)}"
        raise WireError(f"invalid JSON at {where}: {getattr(exc, 'msg', exc)}") from None
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


def _encode(value: Any) -> str:
    """json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))."""
    if isinstance(value, str):
        return str(_encode_string(value))
    if _make_encoder is None:
        import json

        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    # A fresh encoder per call: its `markers` dict is the circular-reference check.
    encoder = _make_encoder(
        {}, _raise_unserializable, _encode_string, None, ":", ",", False, False, False
    )
    return "".join(encoder(value, 0))


def dumps(value: Any) -> bytes:
    """Serialize for the wire: compact UTF-8, no NaN, lone surrogates refused."""
    try:
        return _encode(value).encode("utf-8")
    except (ValueError, UnicodeEncodeError) as exc:
        raise WireError(f"cannot serialize: {exc}") from None
