"""The one escape for text that came from a sandbox, a worker, a model or a person before
it is shown: on a terminal, in a log line, or in a JSON document someone may print.

A terminal acts on some characters instead of showing them: C0 controls (ESC starts the
CSI and OSC sequences that recolour, retitle, move the cursor or write to the clipboard;
CR overwrites a line), DEL, the C1 controls U+0080-U+009F (U+009B is a one-character
CSI, U+009D an OSC), and the bidi controls that reorder what is shown. `escape_controls`
writes each of them as the literal text `\\xNN` or `\\uNNNN` (a lone surrogate, which no
terminal encoding can print, too), so a sequence arrives as inert characters. Tab stays;
LF stays only in multi-line text (`multiline=True`), where `\\r\\n` is read as LF.

JSON (`--json`, event lines, JSON-lines logs) is a document a person also prints: `dumps`
writes non-ASCII text as it is (readable) but every character above as a `\\uNNNN`
escape, as `ensure_ascii` would; a JSON parser reads back exactly the same value.
"""

from __future__ import annotations

import json
import re
from typing import Any

from envelopes.rules import BIDI_CONTROLS

#: What `escape_controls` escapes in one-line text: C0 but tab, DEL, C1, bidi, surrogates.
CONTROL_CHARACTERS = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{BIDI_CONTROLS}\ud800-\udfff]")
#: The same, with LF allowed (multi-line text).
_CONTROL_MULTILINE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI_CONTROLS}\ud800-\udfff]")
#: What a JSON text written with ensure_ascii=False may still hold raw (C0 is escaped by
#: every encoder already; DEL, C1, bidi and lone surrogates are not).
_JSON_UNSAFE = re.compile(f"[\x7f-\x9f{BIDI_CONTROLS}\ud800-\udfff]")


def escape_controls(text: str, multiline: bool = False) -> str:
    """`text` with every control, bidi and surrogate character written as `\\xNN` or
    `\\uNNNN` (LF kept when `multiline`; tab always kept)."""
    if multiline:
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        return _CONTROL_MULTILINE.sub(_escape_one, text)
    return CONTROL_CHARACTERS.sub(_escape_one, text)


def has_control_characters(value: Any) -> bool:
    """Whether any string in `value` (a str, or lists and dicts of them, keys included)
    holds a character `escape_controls` would escape besides LF, tab and CR."""
    if isinstance(value, str):
        return _CONTROL_MULTILINE.search(value.replace("\r", "")) is not None
    if isinstance(value, dict):
        return any(has_control_characters(k) or has_control_characters(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_control_characters(item) for item in value)
    return False


def dumps(document: Any, indent: int | None = None) -> str:
    """`document` as JSON text safe to print: non-ASCII kept, but DEL, C1, bidi controls
    and lone surrogates written as `\\uNNNN` (C0 controls are escaped by JSON itself)."""
    text = json.dumps(document, ensure_ascii=False, indent=indent)
    # Outside strings a JSON text is ASCII, so every match is inside a string.
    return _JSON_UNSAFE.sub(_json_escape, text)


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


__all__ = ["CONTROL_CHARACTERS", "dumps", "escape_controls", "has_control_characters"]
