"""Reading the result file `session complete` is given, as agents-exe does: a
UserToolResponse, a v1 ToolCallResult envelope, any other JSON, or plain text."""

from __future__ import annotations

from pathlib import Path

from runner.cli.app import fail
from runner.session import ToolResult
from runner.session.results import ResultError, result_from_text

#: Largest result file `session complete` reads.
MAX_RESULT_FILE_BYTES = 16 * 1024 * 1024


def read_result(path: Path) -> ToolResult:
    """A result file: a UserToolResponse (agents-exe's camelCase or the envelope's
    snake_case), a v1 ToolCallResult envelope, any other JSON (a JSON result), or text."""
    try:
        with open("/dev/stdin", "rb") if str(path) == "-" else path.open("rb") as handle:
            data = handle.read(MAX_RESULT_FILE_BYTES + 1)
    except OSError as exc:
        fail(f"cannot read the result file {path}: {exc.strerror}")
    if len(data) > MAX_RESULT_FILE_BYTES:
        fail(f"the result file {path} is larger than {MAX_RESULT_FILE_BYTES} bytes")
    if not data.strip():
        fail(f"the result file {path} is empty; a result needs some content")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"the result file {path} is not UTF-8 text: {exc}")
    try:
        return result_from_text(text, str(path))
    except ResultError as exc:
        fail(str(exc))
