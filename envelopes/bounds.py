"""The envelope's version, bounds and identifier patterns, standard library only.

`envelopes.v1` re-exports all of these (they are part of its contract); they live here
so that a worker can check a request without importing pydantic (see envelopes.worker).
"""

from __future__ import annotations

VERSION = "1.0"
MAJOR = 1
SUPPORTED_VERSIONS: tuple[str, ...] = ("1.0",)

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
VERSION_PATTERN = r"^[0-9]{1,4}\.[0-9]{1,4}$"
EXTENSION_KEY_PATTERN = r"^[a-z][a-z0-9-]*(\.[a-z0-9-]+)*/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MIME_PATTERN = r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,127}$"
BASE64_PATTERN = r"^[A-Za-z0-9+/]*={0,2}$"
FILENAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_. -]{0,254}$"
WORKER_VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9.+_-]*$"

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
