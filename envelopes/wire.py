"""Strict JSON in and out: the only way bytes from the other side become Python values.

Everything a worker sends is untrusted. Before any schema looks at it, this module makes
sure it is exactly one JSON document that every mainstream parser reads the same way:
a byte cap checked before parsing, UTF-8 without a BOM, no duplicate keys, no NaN or
Infinity, no lone surrogates, integers that survive an IEEE double, bounded nesting, a
bounded number of values and nothing after the document but whitespace. A parser
differential (two parsers reading one payload differently) is how envelopes get smuggled
past reviewers; this closes them.

Only the standard library is used here, so any worker can vendor this file. On CPython it
drives the `_json` accelerator (the very scanner and encoder `json` itself uses) without
importing the `json` package, whose import (and `re`'s) costs a fresh worker process more
CPU than everything else it does for a request; elsewhere it falls back to `json`. The
saving is measured, not assumed: `scripts/bench --only wire` times a worker's start and
one call against the same with `json` imported (3 ms here, 9 ms in the python-runner
image, in December 2026); if it ever falls under 1 ms, plain `json` is the better reader.

The cost is linear and small for any input under the caps: the values are counted before
the scanner builds them (the count is a bound on its memory), and what the scanner leaves
unchecked (nesting, escaped lone surrogates) is checked in one walk that is skipped when
the bytes cannot hold a fault, naming a place only for the value at fault.
"""

from __future__ import annotations

import math

#: typing itself costs a fresh process milliseconds; mypy reads this name as typing's.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

#: Deepest nesting of arrays and objects accepted in a document (the envelope itself
#: uses four levels; tool arguments and JSON output get the rest).
MAX_DEPTH = 64

#: Integers outside +-(2^53 - 1) lose precision in JavaScript and other double-based
#: parsers, so they are refused rather than silently read differently.
MAX_SAFE_INTEGER = 2**53 - 1

#: Most values (objects, arrays, strings, numbers, literals) accepted in a document: what
#: bounds the parsed tree's memory (a few dozen bytes a value) whatever the byte cap.
MAX_VALUES = 1_000_000

_BOM = b"\xef\xbb\xbf"


class WireError(ValueError):
    """The bytes are not one acceptable JSON document. `reason` says what and where;
    when one value is at fault, `path` names it (`$.a.b[3]`) and `problem` is the
    reason without the place."""

    def __init__(self, reason: str, *, path: str | None = None, problem: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path
        self.problem = problem or reason


class WireTooLarge(WireError):
    """The document is over a cap: more bytes or more values than the reader takes."""


class _Reject(ValueError):
    """Raised by parse hooks; turned into a WireError with a position by `loads`."""


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)  # in C; a duplicate makes it shorter, and only then is it looked for
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Reject(f"duplicate key {key[:40]!r} in an object")
            seen.add(key)
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


class _PlainNumbers(_ScanContext):
    """The scanner's own int and float, for bytes where no number can break a rule."""

    # The types themselves, which the C scanner recognises and parses without a call.
    parse_float = float  # type: ignore[assignment]
    parse_int = int  # type: ignore[assignment]


#: Digits as "d" and "E" as "e", for `_numbers_are_plain` to look for shapes in.
_NUMBER_SHAPES = bytes.maketrans(b"0123456789E", b"dddddddddde")


def _numbers_are_plain(data: bytes) -> bool:
    """Whether no number in `data` can be refused: an integer past 2^53-1 has 16 digits
    and a float that overflows a 3-digit exponent (or a 16-digit run in its mantissa).
    Bytes without either shape skip a Python call per number (a string holding one
    only costs that call)."""
    shapes = data.translate(_NUMBER_SHAPES)
    return b"d" * 16 not in shapes and b"eddd" not in shapes and b"e+ddd" not in shapes


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
_scan_plain: Any = _make_scanner(_PlainNumbers())


def _scan(text: str, start: int, scan_once: Any = None) -> tuple[Any, int]:
    scan_once = scan_once or _scan_once
    try:
        result: tuple[Any, int] = scan_once(text, start)
    except SystemError:
        # The C scanner words its errors with json.decoder.JSONDecodeError, which it only
        # looks up among the modules already imported: import it and scan again.
        import json.decoder  # noqa: F401

        result = scan_once(text, start)
    return result


def _json_error(message: str, text: str, pos: int) -> ValueError:
    from json import JSONDecodeError  # only on the way to an error

    return JSONDecodeError(message, text, pos)


class _Flaw:
    """What the locating scan puts where the strict one refused (see `_located`)."""

    __slots__ = ("key", "problem")

    def __init__(self, problem: str, key: str | None = None) -> None:
        self.problem = problem
        self.key = key  # a duplicate key: the place is that member of the object


def _lenient_pairs(pairs: list[tuple[str, Any]]) -> Any:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            return _Flaw(f"duplicate key {key[:40]!r} in an object", key)
        obj[key] = value
    return obj


def _marking(hook: Any) -> Any:
    def marked(text: str) -> Any:
        try:
            return hook(text)
        except _Reject as exc:
            return _Flaw(str(exc))

    return marked


class _LocateContext(_ScanContext):
    """The strict hooks, except that a refusal becomes a _Flaw in the tree, not a raise."""

    object_pairs_hook = staticmethod(_lenient_pairs)
    parse_float = staticmethod(_marking(_parse_float))
    parse_int = staticmethod(_marking(_parse_int))
    parse_constant = staticmethod(_marking(_reject_constant))


def _located(text: str, start: int, max_depth: int, refusal: _Reject) -> WireError:
    """`refusal` (raised by a hook, which cannot know where it is) with its place: the
    document scanned again with hooks that mark instead of raising, then walked."""
    try:
        value, _ = _scan(text, start, _make_scanner(_LocateContext()))
    except (ValueError, RecursionError, StopIteration):  # it stops at another fault
        return WireError(str(refusal))
    if isinstance(value, _Flaw):
        return _at(value.problem, [] if value.key is None else [value.key])
    if isinstance(value, dict | list):
        found = _first_flaw(value, max_depth)
        if found is not None:
            return found
    return WireError(str(refusal))


def _too_deep(root: Any, max_depth: int) -> WireError | None:
    """The first container nested deeper than `max_depth`, in document order. One
    pass, no recursion: a stack of at most `max_depth` (container, iterator) frames;
    the path is read off the stack only for the container at fault."""
    stack: list[tuple[Any, Iterator[Any]]] = [(root, _values(root))]
    while stack:
        for child in stack[-1][1]:
            kind = type(child)
            if kind is dict or kind is list:
                if len(stack) >= max_depth:
                    return _at(f"nesting deeper than {max_depth} levels", _labels(stack))
                if child:  # an empty one has nothing to visit
                    stack.append((child, _values(child)))
                    break
        else:
            stack.pop()
    return None


def _first_flaw(root: Any, max_depth: int) -> WireError | None:
    """`_too_deep`, and the first lone surrogate (in a key or a string) or _Flaw mark."""
    stack: list[tuple[Any, Iterator[Any]]] = [(root, _values(root, keys=True))]
    while stack:
        container, children = stack[-1]
        keyed = type(container) is dict
        for child in children:
            if keyed:
                key, child = child
                if not key.isascii() and (lone := _lone_surrogate(key)) is not None:
                    return _at(f"a lone surrogate ({lone}) in a string (a key)",
                               _labels(stack)[:-1])  # fmt: skip
            kind = type(child)
            if kind is dict or kind is list:
                if len(stack) >= max_depth:
                    return _at(f"nesting deeper than {max_depth} levels", _labels(stack))
                if child:
                    stack.append((child, _values(child, keys=True)))
                    break
            elif kind is str:
                if not child.isascii() and (lone := _lone_surrogate(child)) is not None:
                    return _at(f"a lone surrogate ({lone}) in a string", _labels(stack))
            elif kind is _Flaw:
                labels = _labels(stack) if child.key is None else [*_labels(stack), child.key]
                return _at(child.problem, labels)
        else:
            stack.pop()
    return None


def _values(container: Any, keys: bool = False) -> Iterator[Any]:
    if type(container) is not dict:
        return iter(container)
    return iter(container.items() if keys else container.values())


def _labels(stack: list[tuple[Any, Iterator[Any]]]) -> list[str | int]:
    """The key or index of the child each frame's iterator gave last: the path."""
    labels: list[str | int] = []
    for container, children in stack:
        index = len(container) - children.__length_hint__() - 1  # type: ignore[attr-defined]
        labels.append(list(container)[index] if type(container) is dict else index)
    return labels


def _lone_surrogate(text: str) -> str | None:
    """`\\udxxx` for the first lone surrogate in `text`, or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"\\u{ord(text[exc.start]):04x}"
    return None


def _at(problem: str, labels: list[str | int]) -> WireError:
    path = "$" + "".join(f"[{x}]" if isinstance(x, int) else f".{_key(x)}" for x in labels)
    return WireError(f"{problem} at {path}", path=path, problem=problem)


def _key(key: str) -> str:
    shown = key[:40]
    return shown if shown.isprintable() else repr(shown)


#: Bytes of a document looked at together by `_count_values` (its transient memory is a
#: small multiple of this, whatever the document's size).
_WINDOW = 1 << 18


def _count_values(data: bytes, window: int = _WINDOW) -> int:
    """The values in `data` if it is JSON: the first, plus one after each comma and one
    for each non-empty array or object, counted outside strings. Called only when the
    bound (the same bytes counted everywhere) is over the cap; bytes methods do the work
    a window at a time, so it is C speed and small in memory."""
    # Escaped backslashes, then escaped quotes, go: every quote left opens or closes a
    # string. Blanks go too (inside strings they do not matter), so `[ ]` reads `[]`.
    bare = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, b" \t\n\r")
    commas = openers = empty = 0
    inside, last = False, b""
    for start in range(0, len(bare), window):
        pieces = bare[start : start + window].split(b'"')
        # A "0" where each string was, so `[""]` is not read as an empty array.
        outside = b"0".join(pieces[1::2] if inside else pieces[0::2])
        if inside and len(pieces) > 1:
            outside = b"0" + outside
        commas += outside.count(b",")
        openers += outside.count(b"[") + outside.count(b"{")
        empty += outside.count(b"[]") + outside.count(b"{}")
        if (last + outside[:1]) in (b"[]", b"{}"):  # one split by the window's edge
            empty += 1
        last = outside[-1:] or last
        inside ^= len(pieces) % 2 == 0
    return 1 + commas + openers - empty


def loads(
    data: bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES
) -> dict[str, Any]:
    """Parse exactly one JSON object from `data`, refusing anything ambiguous.

    Raises WireError with a one-line reason naming the problem and its position
    (WireTooLarge when over `max_bytes` or `max_values`, which may only lower MAX_VALUES).
    """
    if len(data) > max_bytes:
        raise WireTooLarge(f"document is {len(data)} bytes, over the cap of {max_bytes}")
    if not data.strip():
        raise WireError("empty input: expected one JSON object")
    if data.startswith(_BOM):
        raise WireError("input starts with a byte order mark; send plain UTF-8")
    max_values = min(max_values, MAX_VALUES)
    # Bytes count what UTF-8 text holds: these ASCII bytes are never inside a sequence.
    openers = data.count(b"[") + data.count(b"{")
    if 1 + data.count(b",") + openers > max_values and _count_values(data) > max_values:
        raise WireTooLarge(f"document holds more than {max_values} values")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError(f"invalid UTF-8 at byte {exc.start}") from None
    try:
        start = _skip_whitespace(text, 0)
        try:
            value, end = _scan(text, start, _numbers_are_plain(data) and _scan_plain)
        except StopIteration as stop:  # what json.JSONDecoder.raw_decode turns it into
            raise _json_error("Expecting value", text, stop.value) from None
    except _Reject as exc:
        raise _located(text, start, max_depth, exc) from None
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
    # Valid UTF-8 holds no surrogates: a lone one can only come from a \u escape.
    if b"\\ud" in data or b"\\uD" in data:
        flaw = _first_flaw(value, max_depth)
    else:
        flaw = _too_deep(value, max_depth) if openers > max_depth else None
    if flaw is not None:
        raise flaw
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
