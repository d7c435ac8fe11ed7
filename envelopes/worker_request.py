"""A ToolCallRequest checked without pydantic, for envelopes.worker's fast path.

`check_call(doc)` takes a parsed request (wire.loads) whose kind and version are already
known good, and returns a RequestView when every field provably passes the model
(envelopes.v1.ToolCallRequest: strict types, patterns, bounds, unknown fields ignored),
or None when it cannot vouch for the document; the model then decides and words the
refusal. So the checks here may refuse more than the model, never less: each is the
model's rule as envelopes.rules spells it with str and int operations (the patterns
the model checks are derived from the same rules; they are anchored and ASCII, and
pydantic's regex engine has no `$`-before-newline quirk to mirror).
"""

from __future__ import annotations

from types import MappingProxyType

from envelopes import rules
from envelopes.events import NULL, Emitter, NullEmitter
from envelopes.rules import is_extension_key, json_bounded
from envelopes.wire import MAX_SAFE_INTEGER

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from envelopes.v1 import ToolCallRequest


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


class FileView(_Fields):
    __slots__ = ()
    _FIELDS = ("path", "content", "encoding", "mode")

    def __getattr__(self, name: str) -> Any:
        value = super().__getattr__(name)
        if value is None and name in _FILE_DEFAULTS:
            return _FILE_DEFAULTS[name]
        return value


class CollectView(_Fields):
    __slots__ = ()
    _FIELDS = ("patterns", "max_files", "max_bytes")

    def __getattr__(self, name: str) -> Any:
        value = super().__getattr__(name)
        return _COLLECT_DEFAULTS.get(name) if value is None else value


class EventsView(_Fields):
    __slots__ = ()
    _FIELDS = ("max_per_second", "max_bytes")

    def __getattr__(self, name: str) -> Any:
        value = super().__getattr__(name)
        return _EVENTS_DEFAULTS.get(name) if value is None else value


_FILE_DEFAULTS = MappingProxyType({"encoding": "utf-8", "mode": rules.FILE_MODE_DEFAULT})
_COLLECT_DEFAULTS = MappingProxyType(
    {"max_files": rules.COLLECT_DEFAULT_MAX_FILES, "max_bytes": rules.COLLECT_DEFAULT_MAX_BYTES}
)
_EVENTS_DEFAULTS = MappingProxyType(
    {
        "max_per_second": rules.EVENTS_DEFAULT_MAX_PER_SECOND,
        "max_bytes": rules.EVENTS_DEFAULT_MAX_BYTES,
    }
)


class RequestView:
    """A checked ToolCallRequest: its fields as attributes (`id`, `version`, `tool.name`,
    `arguments`, `deadline_ms`, `limits.max_result_bytes`, `context`, `extensions`, and
    in 1.1 `files`, `collect`, `events`); any other attribute comes from the pydantic
    model, built on first use. The worker SDK adds `workspace` (the call's directory,
    the handler's working directory) and `emit` (events: `emit.log(text)`,
    `emit.progress(fraction, message)`, `emit.partial(text)`; no-ops without `events`)."""

    __slots__ = (
        "_doc",
        "_model",
        "arguments",
        "collect",
        "context",
        "deadline_ms",
        "emit",
        "events",
        "extensions",
        "files",
        "id",
        "kind",
        "limits",
        "tool",
        "version",
        "workspace",
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
        # 1.1 members; a 1.0 request's are ignored (must-ignore), as the model does.
        newer = at_least_1_1(self.version)
        files, collect, events = (doc.get(n) if newer else None for n in _NEWER)
        self.files = None if files is None else tuple(FileView(f) for f in files)
        self.collect = None if collect is None else CollectView(collect)
        self.events = None if events is None else EventsView(events)
        self.workspace: str | None = None
        self.emit: Emitter | NullEmitter = NULL

    @classmethod
    def of_model(cls, model: ToolCallRequest) -> RequestView:
        """A view over a request the model validated (the slow path)."""
        view = cls(model.to_wire())
        view._model = model
        return view

    def raw(self, name: str) -> Any:
        """A 1.1 member as sent (None when absent, or in a 1.0 request)."""
        return self._doc.get(name) if at_least_1_1(self.version) else None

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


_NEWER = ("files", "collect", "events")


def at_least_1_1(version: str) -> bool:
    """Whether `version` (a checked `major.minor`) is 1.1 or later."""
    return rules.version_at_least(version, "1.1")


def _collect_ok(collect: object) -> bool:
    if collect is None:
        return True
    if type(collect) is not dict:
        return False
    patterns = collect.get("patterns")
    max_files = collect.get("max_files", rules.COLLECT_DEFAULT_MAX_FILES)
    max_bytes = collect.get("max_bytes", rules.COLLECT_DEFAULT_MAX_BYTES)
    return (
        type(patterns) is list
        and 1 <= len(patterns) <= rules.COLLECT_MAX_PATTERNS
        and all(rules.glob_problem(pattern) is None for pattern in patterns)
        and type(max_files) is int
        and 1 <= max_files <= rules.COLLECT_MAX_FILES_CEILING
        and type(max_bytes) is int
        and 1 <= max_bytes <= rules.COLLECT_MAX_BYTES_CEILING
    )


def _events_ok(events: object) -> bool:
    if events is None:
        return True
    if type(events) is not dict:
        return False
    rate = events.get("max_per_second", rules.EVENTS_DEFAULT_MAX_PER_SECOND)
    size = events.get("max_bytes", rules.EVENTS_DEFAULT_MAX_BYTES)
    return (
        type(rate) is int
        and 1 <= rate <= rules.EVENTS_MAX_PER_SECOND_CEILING
        and type(size) is int
        and 1 <= size <= rules.EVENTS_MAX_BYTES_CEILING
    )


def _files_ok(files: object) -> bool:
    if files is None:
        return True
    from envelopes.files import check_files

    return not isinstance(check_files(files), str)


def _newer_ok(doc: dict[str, Any]) -> bool:
    """The 1.1 members of a 1.1 request; a 1.0 request's are ignored, as by the model."""
    if not at_least_1_1(doc["version"]):
        return True
    return (
        _events_ok(doc.get("events"))
        and _collect_ok(doc.get("collect"))
        and _files_ok(doc.get("files"))
    )


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
        _optional_text(context, "session_id", rules.MAX_CONTEXT_ID)
        and _optional_text(context, "call_id", rules.MAX_CONTEXT_ID)
        and _optional_text(context, "idempotency_key", rules.MAX_IDEMPOTENCY_KEY)
        and (attempt is None or (type(attempt) is int and 1 <= attempt <= rules.MAX_ATTEMPT))
    )


def _extensions_ok(extensions: object) -> bool:
    if extensions is None:
        return True
    return (
        type(extensions) is dict
        and len(extensions) <= rules.MAX_EXTENSIONS
        and all(is_extension_key(key) for key in extensions)
        and json_bounded(list(extensions.values()))
    )


def check_call(doc: dict[str, Any]) -> RequestView | None:
    """A RequestView when `doc` (kind and version already checked) is a valid request."""
    tool, limits, deadline = doc.get("tool"), doc.get("limits"), doc.get("deadline_ms")
    arguments = doc.get("arguments")
    if not (
        rules.ID.match(doc.get("id"))
        and type(tool) is dict
        and rules.TOOL_NAME.match(tool.get("name"))
        and type(arguments) is dict
        and json_bounded(arguments)
        and type(deadline) is int
        and 0 <= deadline <= MAX_SAFE_INTEGER
        and type(limits) is dict
        and type(limits.get("max_result_bytes")) is int
        and 1 <= limits["max_result_bytes"] <= rules.MAX_RESULT_BYTES_CEILING
        and _context_ok(doc.get("context"))
        and _extensions_ok(doc.get("extensions"))
        and _newer_ok(doc)
    ):
        return None
    return RequestView(doc)
