"""A ToolCallRequest checked without pydantic, for envelopes.worker's fast path.

`check_call(doc)` takes a parsed request (wire.loads) whose kind and version are already
known good, and returns a RequestView when every field provably passes the model
(envelopes.v1.ToolCallRequest: strict types, patterns, bounds, unknown fields ignored),
or None when it cannot vouch for the document; the model then decides and words the
refusal. So the checks here may refuse more than the model, never less: each is the
model's rule spelled with str and int operations (the patterns are anchored and ASCII,
and pydantic's regex engine has no `$`-before-newline quirk to mirror).
"""

from __future__ import annotations

from math import isfinite

from envelopes import bounds
from envelopes.wire import MAX_SAFE_INTEGER

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from envelopes.v1 import ToolCallRequest

_LOWER = "abcdefghijklmnopqrstuvwxyz"
_ALNUM = frozenset(_LOWER + _LOWER.upper() + "0123456789")
_DIGITS = frozenset("0123456789")
_ID_REST = _ALNUM | frozenset("._:-")
_NAME_START = frozenset(_LOWER + _LOWER.upper())
_NAME_REST = _ALNUM | frozenset("_.-")
_WORKER_VERSION_REST = _ALNUM | frozenset(".+_-")
_NAMESPACE_PART = frozenset(_LOWER + "0123456789-")


def is_id(value: object) -> bool:
    """bounds.ID_PATTERN, max 128."""
    return (
        type(value) is str
        and 0 < len(value) <= 128
        and value[0] in _ALNUM
        and _ID_REST.issuperset(value)
    )


def is_tool_name(value: object) -> bool:
    """bounds.TOOL_NAME_PATTERN, max 64."""
    return (
        type(value) is str
        and 0 < len(value) <= 64
        and value[0] in _NAME_START
        and _NAME_REST.issuperset(value)
    )


def is_worker_version(value: object) -> bool:
    """bounds.WORKER_VERSION_PATTERN, 1 to 64 characters."""
    return (
        type(value) is str
        and 0 < len(value) <= 64
        and value[0] in _ALNUM
        and _WORKER_VERSION_REST.issuperset(value)
    )


def is_version(value: object) -> bool:
    """bounds.VERSION_PATTERN: digits.digits, one to four of each."""
    if type(value) is not str:
        return False
    major, dot, minor = value.partition(".")
    return bool(
        dot
        and 0 < len(major) <= 4
        and 0 < len(minor) <= 4
        and _DIGITS.issuperset(major)
        and _DIGITS.issuperset(minor)
    )


def is_extension_key(value: object) -> bool:
    """bounds.EXTENSION_KEY_PATTERN: `vendor.example/key`."""
    if type(value) is not str:
        return False
    namespace, slash, key = value.partition("/")
    if not slash or not (0 < len(key) <= 64 and key[0] in _ALNUM and _NAME_REST.issuperset(key)):
        return False
    first, *rest = namespace.split(".")
    return (
        bool(first)
        and first[0] in _LOWER
        and _NAMESPACE_PART.issuperset(first)
        and all(part and _NAMESPACE_PART.issuperset(part) for part in rest)
    )


def json_bounded(value: object, *, exact: bool = False, max_depth: int = 0) -> bool:
    """v1's bounds on a JSON value (string length, items, properties, key length, safe
    integers, finite floats). `exact` also refuses subclasses of the JSON types (a value
    a tool returned, which json and pydantic might write differently); `max_depth`, when
    set, refuses values nested deeper."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        kind = type(node)
        if kind is str:
            if len(node) > bounds.MAX_STRING:  # type: ignore[arg-type]
                return False
        elif kind is dict or (not exact and isinstance(node, dict)):
            if (max_depth and depth > max_depth) or len(node) > bounds.MAX_PROPERTIES:  # type: ignore[arg-type]
                return False
            for key, child in node.items():  # type: ignore[attr-defined]
                if type(key) is not str or len(key) > bounds.MAX_KEY:
                    return False
                stack.append((child, depth + 1))
        elif kind is list or (not exact and isinstance(node, list)):
            if (max_depth and depth > max_depth) or len(node) > bounds.MAX_ITEMS:  # type: ignore[arg-type]
                return False
            stack.extend((child, depth + 1) for child in node)  # type: ignore[attr-defined]
        elif node is None or kind is bool:
            continue
        elif kind is int:
            if not -MAX_SAFE_INTEGER <= node <= MAX_SAFE_INTEGER:  # type: ignore[operator]
                return False
        elif kind is float:
            if not isfinite(node):  # type: ignore[arg-type]
                return False
        else:  # not a JSON value, or a subclass of str, int or float: the model decides
            return False
    return True


class _Fields:
    """Attributes over a checked sub-document, with the model's defaults (None)."""

    __slots__ = ("_doc",)
    _FIELDS: tuple[str, ...] = ()

    def __init__(self, doc: dict[str, Any]) -> None:
        self._doc = doc

    def __getattr__(self, name: str) -> Any:
        if name in self._FIELDS:
            return self._doc.get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={self._doc.get(name)!r}" for name in self._FIELDS)
        return f"{type(self).__name__}({shown})"


class ToolRefView(_Fields):
    __slots__ = ()
    _FIELDS = ("name",)


class LimitsView(_Fields):
    __slots__ = ()
    _FIELDS = ("max_result_bytes",)


class ContextView(_Fields):
    __slots__ = ()
    _FIELDS = ("session_id", "call_id", "attempt", "idempotency_key")


class RequestView:
    """A checked ToolCallRequest: its fields as attributes (`id`, `version`, `tool.name`,
    `arguments`, `deadline_ms`, `limits.max_result_bytes`, `context`, `extensions`);
    any other attribute comes from the pydantic model, built on first use."""

    __slots__ = (
        "_doc",
        "_model",
        "arguments",
        "context",
        "deadline_ms",
        "extensions",
        "id",
        "kind",
        "limits",
        "tool",
        "version",
    )

    def __init__(self, doc: dict[str, Any]) -> None:
        self._doc = doc
        self._model: ToolCallRequest | None = None
        self.kind = "ToolCallRequest"
        self.version: str = doc["version"]
        self.id: str = doc["id"]
        self.tool = ToolRefView(doc["tool"])
        self.arguments: dict[str, Any] = doc["arguments"]
        self.deadline_ms: int = doc["deadline_ms"]
        self.limits = LimitsView(doc["limits"])
        context = doc.get("context")
        self.context = None if context is None else ContextView(context)
        self.extensions: dict[str, Any] | None = doc.get("extensions")

    def model(self) -> ToolCallRequest:
        """The pydantic ToolCallRequest for this request."""
        if self._model is None:
            from envelopes.v1 import ToolCallRequest

            self._model = ToolCallRequest.model_validate(self._doc)
        return self._model

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.model(), name)

    def __repr__(self) -> str:
        return f"RequestView(id={self.id!r}, tool={self.tool.name!r})"


def _optional_text(doc: dict[str, Any], name: str, longest: int) -> bool:
    value = doc.get(name)
    return value is None or (type(value) is str and len(value) <= longest)


def _context_ok(context: object) -> bool:
    if context is None:
        return True
    if type(context) is not dict:
        return False
    attempt = context.get("attempt")
    return (
        _optional_text(context, "session_id", 128)
        and _optional_text(context, "call_id", 128)
        and _optional_text(context, "idempotency_key", 256)
        and (attempt is None or (type(attempt) is int and 1 <= attempt <= 1_000_000))
    )


def _extensions_ok(extensions: object) -> bool:
    if extensions is None:
        return True
    return (
        type(extensions) is dict
        and len(extensions) <= bounds.MAX_EXTENSIONS
        and all(is_extension_key(key) for key in extensions)
        and json_bounded(list(extensions.values()))
    )


def check_call(doc: dict[str, Any]) -> RequestView | None:
    """A RequestView when `doc` (kind and version already checked) is a valid request."""
    tool, limits, deadline = doc.get("tool"), doc.get("limits"), doc.get("deadline_ms")
    arguments = doc.get("arguments")
    if not (
        is_id(doc.get("id"))
        and type(tool) is dict
        and is_tool_name(tool.get("name"))
        and type(arguments) is dict
        and json_bounded(arguments)
        and type(deadline) is int
        and 0 <= deadline <= MAX_SAFE_INTEGER
        and type(limits) is dict
        and type(limits.get("max_result_bytes")) is int
        and 1 <= limits["max_result_bytes"] <= bounds.MAX_RESULT_BYTES_CEILING
        and _context_ok(doc.get("context"))
        and _extensions_ok(doc.get("extensions"))
    ):
        return None
    return RequestView(doc)
