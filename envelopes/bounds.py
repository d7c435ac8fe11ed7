"""The envelope's version, bounds and identifier patterns, standard library only.

`envelopes.v1` re-exports all of these (they are part of its contract); they live here
so that a worker can check a request without importing pydantic (see envelopes.worker).
"""

from __future__ import annotations

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
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
TOOL_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$"
#: `major.minor`, each 0 or 1 to 4 digits without a leading zero (`1.01` is not a version),
#: compared as the pair of numbers (`1.10` is after `1.9`).
VERSION_PATTERN = r"^(?:0|[1-9][0-9]{0,3})\.(?:0|[1-9][0-9]{0,3})$"
EXTENSION_KEY_PATTERN = r"^[a-z][a-z0-9-]*(\.[a-z0-9-]+)*/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MIME_PATTERN = r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,127}$"
BASE64_PATTERN = r"^[A-Za-z0-9+/]*={0,2}$"
FILENAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_. -]{0,254}$"
WORKER_VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9.+_-]*$"

#: `critical` (1.1): request members a worker must understand, or refuse the request.
#: Each is a top-level member name or an extension key; at most this many, unique.
CRITICAL_MEMBER_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
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
PATH_FORBIDDEN_CLASS = r"\x00-\x1f\x7f-\x9f\\\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
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
BASE64_PADDED_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"

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
CAPABILITY_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
MAX_CAPABILITIES = 16
CAPABILITY_FILES = "files"  # input files and `collect`
CAPABILITY_EVENTS = "events"  # live output on stderr
KNOWN_CAPABILITIES: frozenset[str] = frozenset({CAPABILITY_FILES, CAPABILITY_EVENTS})
