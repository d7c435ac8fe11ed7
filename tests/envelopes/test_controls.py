"""envelopes.controls: the one escape for text shown to a person, and JSON safe to print."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from envelopes.controls import dumps, escape_controls, has_control_characters

#: What a terminal acts on: C0 (tab and LF aside), DEL, C1, bidi controls, surrogates.
ACTED_ON = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def test_each_kind_is_written_as_literal_text():
    assert escape_controls("a\x1b[31mred\x1b]0;title\x07") == "a\\x1b[31mred\\x1b]0;title\\x07"
    assert escape_controls("\x9b31m \x9d0;t\x9c \x7f \x85") == "\\x9b31m \\x9d0;t\\x9c \\x7f \\x85"
    assert escape_controls("\u202eevil\u2066 \u200e\u061c") == "\\u202eevil\\u2066 \\u200e\\u061c"
    assert escape_controls("lone \udc80") == "lone \\udc80"
    assert escape_controls("tab\tkept, [bold]markup[/] kept, é kept") == (
        "tab\tkept, [bold]markup[/] kept, é kept"
    )


def test_line_ends_are_kept_only_in_multi_line_text():
    assert escape_controls("one\ntwo\r\nthree\rover") == "one\\x0atwo\\x0d\\x0athree\\x0dover"
    assert escape_controls("one\ntwo\r\nthree\rover", multiline=True) == (
        "one\ntwo\nthree\\x0dover"
    )


def test_json_carries_c1_bidi_and_del_escaped_and_reads_back_the_same():
    value = {"host": "evil\x9b31m\u202e\x7f\x1b", "name\x9d": ["é", "\x00"]}
    text = dumps(value)
    assert ACTED_ON.search(text) is None
    assert "\\u009b" in text and "\\u202e" in text and "é" in text
    assert json.loads(text) == value


@given(st.text())
def test_nothing_a_terminal_acts_on_survives(text: str):
    assert ACTED_ON.search(escape_controls(text)) is None
    assert ACTED_ON.search(escape_controls(text, multiline=True)) is None
    printed = dumps({"t": text})
    assert ACTED_ON.search(printed) is None and not re.search("[\ud800-\udfff]", printed)
    assert json.loads(printed) == {"t": text}


def test_has_control_characters_ignores_line_ends_and_tabs():
    assert not has_control_characters(["plain\ttext\r\n", {"k": "ünïcödé"}])
    assert has_control_characters({"k\x1b": "v"}) and has_control_characters(["\u202e"])
