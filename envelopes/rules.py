"""The envelope's rules, each written once, standard library only.

Versions, bounds, the grammar of identifiers and versions, the path rules, the control
and line-terminator characters, base64: each rule is stated here once, and everything
else is made from it. The patterns the JSON Schemas publish are derived from the same
character sets as the checks a worker runs without `re` (`Token.pattern`, `Token.match`);
the path and base64 rules word their refusals here, once, for the pydantic models
(envelopes.v1, through validators), the worker SDK's fast path (envelopes.worker_request)
and the file rules (envelopes.files). `envelopes.v1` re-exports the constants as part of
its contract.

Imports stay within what a bare interpreter has loaded: a worker pays for this module at
every start.
"""

from __future__ import annotations

from math import isfinite

from envelopes.wire import MAX_SAFE_INTEGER


def _expand(spelled: str) -> frozenset[str]:
    """The characters of a regex class body spelled with ranges (`A-Za-z0-9._-`): an
    `x-y` is a range, a `-` last is itself. Only the ASCII classes below use it."""
    chars: set[str] = set()
    index = 0
    while index < len(spelled):
        if index + 2 < len(spelled) and spelled[index + 1] == "-":
            chars.update(map(chr, range(ord(spelled[index]), ord(spelled[index + 2]) + 1)))
            index += 3
        else:
            chars.add(spelled[index])
            index += 1
    return frozenset(chars)


class Token(tuple[frozenset[str], frozenset[str], int, str, str]):
    """A string of one `first` character and then `rest` characters, at most `longest`
    in all: one rule, read as a published pattern (`pattern`, ASCII and anchored, so
    Python `re` and ECMA-262 agree on it) and as a check without `re` (`match`).
    `counted` says whether the pattern itself states the length (else the schema's
    maxLength does). A tuple: a module-level rule no code can change."""

    __slots__ = ()

    def __new__(cls, first: str, rest: str, longest: int, *, counted: bool = True) -> Token:
        body = f"[{first}][{rest}]" + (f"{{0,{longest - 1}}}" if counted else "*")
        return super().__new__(cls, (_expand(first), _expand(rest), longest, body, f"^{body}$"))

    @property
    def longest(self) -> int:
        return self[2]

    @property
    def body(self) -> str:
        return self[3]

    @property
    def pattern(self) -> str:
        return self[4]

    def match(self, value: object) -> bool:
        return (
            type(value) is str
            and 0 < len(value) <= self[2]
            and value[0] in self[0]
            and self[1].issuperset(value)
        )


#: The version a request carries by default (and every 1.0 document).
VERSION = "1.0"
MAJOR = 1
#: The newest version this package defines; 1.1 only adds optional fields to 1.0.
LATEST_VERSION = "1.1"
#: Every version the models here read and write.
SUPPORTED_VERSIONS: tuple[str, ...] = ("1.0", "1.1")

#: Largest result a caller may ask for (`limits.max_result_bytes`).
MAX_RESULT_BYTES_CEILING = 64 * 1024 * 1024
DEFAULT_MAX_RESULT_BYTES = 1024 * 1024
#: Largest request envelope a runner will send or a worker should accept.
MAX_REQUEST_BYTES = 16 * 1024 * 1024
#: Longest string anywhere inside an envelope (content is further capped by bytes).
MAX_STRING = MAX_RESULT_BYTES_CEILING
MAX_MESSAGE = 64 * 1024
MAX_ITEMS = 100_000
MAX_PROPERTIES = 10_000
MAX_KEY = 1024
MAX_PARTS = 256
MAX_TOOLS = 256
MAX_EXTENSIONS = 64

# Identifiers: ASCII only and anchored, so Python `re` and ECMA-262 agree on them.
ID = Token("A-Za-z0-9", "A-Za-z0-9._:-", 128)
TOOL_NAME = Token("A-Za-z", "A-Za-z0-9_.-", 64)
WORKER_VERSION = Token("A-Za-z0-9", "A-Za-z0-9.+_-", 64, counted=False)
FILENAME = Token("A-Za-z0-9_", "A-Za-z0-9_. -", 255)
MIME_TYPE = Token("a-z0-9", "a-z0-9!#$&^_.+-", 64)
MIME_SUBTYPE = Token("a-z0-9", "a-z0-9!#$&^_.+-", 128)
#: `vendor.example/key`: lowercase dot-separated labels (the first starting with a
#: letter), a slash, and a key.
EXTENSION_LABEL_START = "a-z"
EXTENSION_LABEL = "a-z0-9-"
EXTENSION_NAME = Token("A-Za-z0-9", "A-Za-z0-9_.-", 64)
ID_PATTERN = ID.pattern
TOOL_NAME_PATTERN = TOOL_NAME.pattern
#: `major.minor`, each 0 or 1 to 4 digits without a leading zero (`1.01` is not a version),
#: compared as the pair of numbers (`1.10` is after `1.9`).
VERSION_NUMBER_DIGITS = 4
_VERSION_NUMBER = rf"(?:0|[1-9][0-9]{{0,{VERSION_NUMBER_DIGITS - 1}}})"
VERSION_PATTERN = rf"^{_VERSION_NUMBER}\.{_VERSION_NUMBER}$"
EXTENSION_KEY_PATTERN = (
    rf"^[{EXTENSION_LABEL_START}][{EXTENSION_LABEL}]*(\.[{EXTENSION_LABEL}]+)*"
    rf"/{EXTENSION_NAME.body}$"
)
MIME_PATTERN = f"^{MIME_TYPE.body}/{MIME_SUBTYPE.body}$"
#: Standard base64 (RFC 4648, section 4), its padding at most two `=` at the end.
BASE64_ALPHABET = "A-Za-z0-9+/"
BASE64_PATTERN = f"^[{BASE64_ALPHABET}]*={{0,2}}$"
FILENAME_PATTERN = FILENAME.pattern
WORKER_VERSION_PATTERN = WORKER_VERSION.pattern

#: `major.minor` at its longest.
MAX_VERSION_LENGTH = 2 * VERSION_NUMBER_DIGITS + 1
MAX_MIME_LENGTH = MIME_TYPE.longest + 1 + MIME_SUBTYPE.longest
#: A request's `context`: the two ids, the idempotency key and the attempt number.
MAX_CONTEXT_ID = 128
MAX_IDEMPOTENCY_KEY = 256
MAX_ATTEMPT = 1_000_000
#: A tool's description, and the versions a describe result lists.
MAX_TOOL_DESCRIPTION = 4096
MAX_SUPPORTED_VERSIONS = 16

#: `critical` (1.1): request members a worker must understand, or refuse the request.
#: Each is a top-level member name or an extension key; at most this many, unique.
CRITICAL_MEMBER = Token("a-z", "a-z0-9_", 64)
CRITICAL_MEMBER_PATTERN = CRITICAL_MEMBER.pattern
MAX_CRITICAL = 16

#: The `id` of an answer to a request too broken to carry a valid id: ID_PATTERN refuses
#: it, so no request can carry it (a result may).
RESERVED_ID = "-"

#: The codes a worker may send (v1.WorkerErrorCode spells the same list as a Literal).
WORKER_ERROR_CODE_NAMES: tuple[str, ...] = (
    "UNSUPPORTED_VERSION",
    "INVALID_REQUEST",
    "UNKNOWN_TOOL",
    "INVALID_ARGUMENTS",
    "PERMISSION_DENIED",
    "TOOL_FAILED",
    "LIMIT_EXCEEDED",
    "DEADLINE_EXCEEDED",
    "UNAVAILABLE",
    "INTERNAL",
)

#: A tool's `effects` (v1.Effects spells the same list as a Literal).
EFFECTS: tuple[str, ...] = ("none", "contained", "external")

# --- 1.1: files in, files out, events, capabilities --------------------------------

#: Input files (`ToolCallRequest.files`): at most this many, and this many bytes decoded
#: in total. Hard caps of the wire: a runner setting may lower them, not raise them (a
#: worker only knows these), and the whole request still has MAX_REQUEST_BYTES.
FILES_MAX_COUNT = 64
FILES_MAX_BYTES = 16 * 1024 * 1024
FILE_ENCODINGS: tuple[str, ...] = ("utf-8", "base64")
FILE_MODE_MAX = 0o777  # no setuid, setgid or sticky bit
FILE_MODE_DEFAULT = 0o644
#: Path rules (envelopes.files.path_problem): UTF-8 bytes of a whole path / a component.
MAX_PATH_BYTES = 1024
MAX_COMPONENT_BYTES = 255
#: Characters no path component may hold, besides `/` (the separator): C0 controls (NUL
#: included), DEL, C1 controls, backslash, and the bidi controls that reorder a name.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
#: C0 (NUL included), then DEL and C1: the control characters, as inclusive code ranges.
CONTROL_RANGES: tuple[tuple[int, int], ...] = ((0x00, 0x1F), (0x7F, 0x9F))


def _class_text(chars: str) -> str:
    """`chars` as a regex class body of `\\uXXXX` escapes, runs of three or more as ranges."""
    codes = sorted(map(ord, chars))
    spans: list[list[int]] = []
    for code in codes:
        if spans and code == spans[-1][1] + 1:
            spans[-1][1] = code
        else:
            spans.append([code, code])
    out = []
    for low, high in spans:
        if high - low >= 2:
            out.append(f"\\u{low:04x}-\\u{high:04x}")
        else:
            out.extend(f"\\u{code:04x}" for code in range(low, high + 1))
    return "".join(out)


PATH_FORBIDDEN_CLASS = (
    "".join(f"\\x{low:02x}-\\x{high:02x}" for low, high in CONTROL_RANGES)
    + "\\\\"
    + _class_text(BIDI_CONTROLS)
)
#: A relative path as the JSON Schema states the path rules: non-empty components of
#: allowed characters joined by `/` (so no leading, trailing or doubled `/`), and none of
#: the two patterns below. Lengths in a schema count characters; the models also hold a
#: path and each component to MAX_PATH_BYTES / MAX_COMPONENT_BYTES of UTF-8.
PATH_PATTERN = rf"^[^/{PATH_FORBIDDEN_CLASS}]+(?:/[^/{PATH_FORBIDDEN_CLASS}]+)*$"
#: A `.` or `..` component: a path matching this is refused.
PATH_DOT_COMPONENT_PATTERN = r"(?:^|/)\.\.?(?:/|$)"
#: A component over 255 characters: a path matching this is refused.
PATH_LONG_COMPONENT_PATTERN = r"[^/]{256}"
#: A component of 256 bytes or more of UTF-8 that the character count above misses: 128
#: characters of two bytes or more, or 86 of three bytes or more (surrogates excluded,
#: so a UTF-16 engine never counts an astral character twice). Sound, not complete: a
#: mix (150 ASCII and 40 three-byte characters) is left to the readers' byte count.
PATH_MULTIBYTE_COMPONENT_PATTERNS: tuple[str, ...] = (
    r"(?:^|/)(?:[^/\u0080-\uffff]{0,254}[\u0080-\uffff]){128}",
    r"(?:^|/)(?:[^/\u0800-\ud7ff\ue000-\uffff]{0,254}[\u0800-\ud7ff\ue000-\uffff]){86}",
)
#: The line terminators after which an anchoring `$` still matches in some engines
#: (Python `re` and PCRE before a final LF; Java before any of these). Every published
#: string schema with an anchored pattern also refuses a string holding one (under a
#: `not`), since none of these patterns admits one anywhere.
LINE_TERMINATOR_PATTERN = r"[\n\r\u0085\u2028\u2029]"
#: The same for the path rules, whose components may hold U+2028 and U+2029 (the others
#: are control characters, refused anywhere in a path).
PATH_LINE_TERMINATOR_PATTERN = r"[\n\r\u0085]"
#: A `collect` pattern: the path rules, with `*`, `?` and `**` as wildcards and no `[...]`.
GLOB_PATTERN = rf"^[^/\[\]{PATH_FORBIDDEN_CLASS}]+(?:/[^/\[\]{PATH_FORBIDDEN_CLASS}]+)*$"
#: Strict base64 for input files: standard alphabet, padded, length a multiple of 4.
_B64 = f"[{BASE64_ALPHABET}]"
BASE64_PADDED_PATTERN = f"^(?:{_B64}{{4}})*(?:{_B64}{{2}}==|{_B64}{{3}}=)?$"

#: `collect`: patterns per request, and the ceilings and defaults of its two caps.
COLLECT_MAX_PATTERNS = 64
COLLECT_MAX_FILES_CEILING = 1024
COLLECT_DEFAULT_MAX_FILES = 64
COLLECT_MAX_BYTES_CEILING = 64 * 1024 * 1024
COLLECT_DEFAULT_MAX_BYTES = 16 * 1024 * 1024

#: `events`: the budget a request gives the worker (ceilings and defaults).
EVENTS_MAX_PER_SECOND_CEILING = 1000
EVENTS_DEFAULT_MAX_PER_SECOND = 20
EVENTS_MAX_BYTES_CEILING = 8 * 1024 * 1024
EVENTS_DEFAULT_MAX_BYTES = 1024 * 1024
#: Event framing on stderr: RS, one compact JSON object, LF; the whole line at most this.
EVENT_RECORD_SEPARATOR = b"\x1e"
EVENT_MAX_LINE_BYTES = 16384
EVENT_TEXT_MAX = 8192  # characters of a log or partial event's text
EVENT_MESSAGE_MAX = 1024  # characters of a progress event's message
EVENT_TYPES: tuple[str, ...] = ("log", "progress", "partial", "dropped")
#: Events a runner delivers per call at most (past it, they are dropped and counted).
EVENTS_MAX_DELIVERED = 10000

#: `error.output_tail` (runner-only): characters of streamed text kept before a kill.
OUTPUT_TAIL_MAX = 65536

#: DescribeResult.capabilities: at most this many, unique, each matching the pattern.
CAPABILITY = Token("a-z", "a-z0-9_-", 32)
CAPABILITY_PATTERN = CAPABILITY.pattern
MAX_CAPABILITIES = 16
CAPABILITY_FILES = "files"  # input files and `collect`
CAPABILITY_EVENTS = "events"  # live output on stderr
KNOWN_CAPABILITIES: frozenset[str] = frozenset({CAPABILITY_FILES, CAPABILITY_EVENTS})


# --- the checks, each the rule above spelled with str and int operations -----------------

_DIGITS = frozenset("0123456789")
_EXTENSION_LABEL_START = _expand(EXTENSION_LABEL_START)
_EXTENSION_LABEL = _expand(EXTENSION_LABEL)


def version_tuple(version: object) -> tuple[int, int] | None:
    """(major, minor) of a `major.minor` string (VERSION_PATTERN), or None."""
    if type(version) is not str:
        return None
    major, dot, minor = version.partition(".")
    for number in (major, minor):
        if not (
            0 < len(number) <= VERSION_NUMBER_DIGITS
            and _DIGITS.issuperset(number)
            and (number == "0" or number[0] != "0")
        ):
            return None
    return (int(major), int(minor)) if dot else None


def is_version(value: object) -> bool:
    """VERSION_PATTERN: digits.digits, one to four of each, no leading zero."""
    return version_tuple(value) is not None


def version_at_least(version: object, minimum: str) -> bool:
    """Whether `version` is a `major.minor` string at `minimum` or later (`"1.10" > "1.9"`)."""
    have, want = version_tuple(version), version_tuple(minimum)
    return have is not None and want is not None and have >= want


def is_extension_key(value: object) -> bool:
    """EXTENSION_KEY_PATTERN: `vendor.example/key`."""
    if type(value) is not str:
        return False
    namespace, slash, key = value.partition("/")
    if not (slash and EXTENSION_NAME.match(key)):
        return False
    first, *rest = namespace.split(".")
    return (
        bool(first)
        and first[0] in _EXTENSION_LABEL_START
        and _EXTENSION_LABEL.issuperset(first)
        and all(part and _EXTENSION_LABEL.issuperset(part) for part in rest)
    )


def is_critical_name(value: object) -> bool:
    """A `critical` entry: a member name (CRITICAL_MEMBER_PATTERN) or an extension key."""
    return CRITICAL_MEMBER.match(value) or is_extension_key(value)


def json_bounds_problem(value: object, *, exact: bool = False, max_depth: int = 0) -> str | None:
    """Why `value` breaks the bounds of a JSON value (string length, items, properties,
    key length, safe integers, finite floats), or None. `exact` also refuses subclasses
    of the JSON types (a value a tool returned, which json and pydantic might write
    differently); `max_depth`, when set, refuses values nested deeper."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        kind = type(node)
        if kind is str or (not exact and isinstance(node, str)):
            if len(node) > MAX_STRING:  # type: ignore[arg-type]
                return f"string longer than {MAX_STRING} characters"
        elif kind is dict or (not exact and isinstance(node, dict)):
            if max_depth and depth > max_depth:
                return f"nested deeper than {max_depth} levels"
            if len(node) > MAX_PROPERTIES:  # type: ignore[arg-type]
                return f"object with more than {MAX_PROPERTIES} properties"
            for key, child in node.items():  # type: ignore[attr-defined]
                if not (type(key) is str or (not exact and isinstance(key, str))):
                    return f"object key {type(key).__name__} is not a string"
                if len(key) > MAX_KEY:
                    return f"object key longer than {MAX_KEY} characters"
                stack.append((child, depth + 1))
        elif kind is list or (not exact and isinstance(node, list)):
            if max_depth and depth > max_depth:
                return f"nested deeper than {max_depth} levels"
            if len(node) > MAX_ITEMS:  # type: ignore[arg-type]
                return f"array with more than {MAX_ITEMS} items"
            stack.extend((child, depth + 1) for child in node)  # type: ignore[attr-defined]
        elif node is None or kind is bool:
            continue
        elif kind is int or (not exact and isinstance(node, int)):
            if not -MAX_SAFE_INTEGER <= node <= MAX_SAFE_INTEGER:  # type: ignore[operator]
                return "integer outside +-(2^53-1)"
        elif kind is float or (not exact and isinstance(node, float)):
            if not isfinite(node):  # type: ignore[arg-type]
                # JSON has no NaN/Infinity; pydantic would silently dump them as null.
                return f"{node} is not a JSON number (non-finite)"
        else:
            return f"{kind.__name__} is not a JSON value"
    return None


def json_bounded(value: object, *, exact: bool = False, max_depth: int = 0) -> bool:
    """Whether `value` is within the bounds of a JSON value (json_bounds_problem)."""
    return json_bounds_problem(value, exact=exact, max_depth=max_depth) is None


# --- paths (section 11.2) -------------------------------------------------------------

_BIDI = frozenset(BIDI_CONTROLS)


def is_control(code: int) -> bool:
    """A C0 control (NUL included), DEL or a C1 control (CONTROL_RANGES)."""
    return any(low <= code <= high for low, high in CONTROL_RANGES)


def path_problem(path: object, *, glob: bool = False) -> str | None:
    """Why `path` breaks the path rules, or None when it obeys them; with `glob`, the
    rules of a `collect` pattern (the same, and no `[` or `]`: `*`, `?` and `**` are
    its wildcards). The message is a predicate that never repeats the path: callers
    name it (`files[2].path: has a '..' component`)."""
    if type(path) is not str:
        return "expected a string"
    if not path:
        return "is empty"
    if len(path) > MAX_PATH_BYTES:  # checked first: never scan a huge string
        return f"is over {MAX_PATH_BYTES} characters, so longer than {MAX_PATH_BYTES} bytes"
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError as exc:
        return f"is not valid UTF-8 (a lone surrogate at character {exc.start})"
    if size > MAX_PATH_BYTES:
        return f"is {size} bytes of UTF-8, over {MAX_PATH_BYTES}"
    if not (path.isascii() and path.isprintable() and "\\" not in path):
        for index, char in enumerate(path):
            code = ord(char)
            if code == 0:
                return f"has a control character (U+0000), NUL, at character {index}"
            if is_control(code):
                return f"has a control character (U+{code:04X}) at character {index}"
            if char == "\\":
                return f"has a backslash at character {index}"
            if char in _BIDI:
                return f"has a bidirectional-text control (U+{code:04X}) at character {index}"
    if path[0] == "/":
        return "is absolute (starts with '/'); paths are relative to the workspace"
    if path[-1] == "/":
        return "ends with '/' (an empty component)"
    for index, part in enumerate(path.split("/"), 1):
        if not part:
            return "has an empty component ('//')"
        if part in (".", ".."):
            return f"has a {part!r} component"
        if len(part) * 4 > MAX_COMPONENT_BYTES:  # only then can it be too long
            size = len(part.encode("utf-8"))
            if size > MAX_COMPONENT_BYTES:
                return (
                    f"component {index} is {size} bytes of UTF-8, over {MAX_COMPONENT_BYTES} bytes"
                )
        if glob and ("[" in part or "]" in part):
            return f"component {index} has a bracket: bracket expressions are not supported"
    return None


def glob_problem(pattern: object) -> str | None:
    """Why `pattern` is not a valid `collect` pattern, or None (path_problem, glob)."""
    return path_problem(pattern, glob=True)


# --- base64 ---------------------------------------------------------------------------

_BASE64_ALPHABET = _expand(BASE64_ALPHABET)


def base64_problem(text: str) -> str | None:
    """Why `text` is not strict base64 (BASE64_PADDED_PATTERN: the standard alphabet,
    padded with `=` to a multiple of 4), or None."""
    if len(text) % 4:
        return "not base64 (padded: the length is not a multiple of 4)"
    data = text[:-2] + text[-2:].rstrip("=")  # at most two `=`, at the very end
    if not _BASE64_ALPHABET.issuperset(data):
        return "not base64 (standard alphabet: A-Z a-z 0-9 + /, padded with =)"
    return None


def is_padded_base64(text: str) -> bool:
    """BASE64_PADDED_PATTERN: standard alphabet, padded to a multiple of 4."""
    return base64_problem(text) is None


def base64_decoded_size(text: str) -> int:
    """Bytes that padded base64 `text` decodes to, without decoding it."""
    return len(text) // 4 * 3 - text[-2:].count("=")
