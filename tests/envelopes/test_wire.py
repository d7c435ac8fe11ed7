"""envelopes.wire: one unambiguous JSON object in, compact UTF-8 out."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envelopes import wire
from envelopes.wire import MAX_DEPTH, MAX_SAFE_INTEGER, WireError

CAP = 1 << 20


def refused(data: bytes, *, max_bytes: int = CAP) -> str:
    with pytest.raises(WireError) as info:
        wire.loads(data, max_bytes=max_bytes)
    assert info.value.reason == str(info.value)
    return info.value.reason


def test_accepts_a_normal_object() -> None:
    data = b'{"a": 1, "b": [true, false, null, 1.5, "x\\u00e9"], "c": {"d": -2}}'
    assert wire.loads(data, max_bytes=CAP) == {
        "a": 1,
        "b": [True, False, None, 1.5, "x\u00e9"],
        "c": {"d": -2},
    }


def test_accepts_surrounding_whitespace_and_trailing_newline() -> None:
    assert wire.loads(b' \t\r\n{"a":1}\n', max_bytes=CAP) == {"a": 1}
    assert wire.loads(b'{"a":1}\r\n\t \n', max_bytes=CAP) == {"a": 1}


def test_accepts_a_document_exactly_at_the_cap() -> None:
    data = b'{"a":1}'
    assert wire.loads(data, max_bytes=len(data)) == {"a": 1}
    assert "over the cap of 6" in refused(data, max_bytes=len(data) - 1)


def test_byte_cap_is_checked_before_parsing() -> None:
    # 64 MiB of "[" would be slow to even start parsing; the cap must refuse it at once.
    huge = b"[" * (64 << 20)
    start = time.perf_counter()
    reason = refused(huge, max_bytes=1024)
    assert time.perf_counter() - start < 0.5
    assert f"document is {len(huge)} bytes, over the cap of 1024" in reason


@pytest.mark.parametrize("data", [b"", b"   ", b"\n\t\r "])
def test_refuses_empty_input(data: bytes) -> None:
    assert "empty input" in refused(data)


def test_refuses_a_byte_order_mark() -> None:
    assert "byte order mark" in refused(b'\xef\xbb\xbf{"a":1}')


def test_refuses_invalid_utf8_with_the_byte_offset() -> None:
    assert refused(b'{"a":"\xff"}') == "invalid UTF-8 at byte 6"
    # A truncated multi-byte sequence and an encoded surrogate are invalid UTF-8 too.
    assert "invalid UTF-8 at byte 8" in refused(b'{"abc":"\xc3"}')
    assert "invalid UTF-8 at byte 6" in refused(b'{"a":"\xed\xa0\x80"}')


@pytest.mark.parametrize(
    "data",
    [b'{"a":1,"a":2}', b'{"x":{"b":1,"b":1}}', b'{"x":[{"k":null,"k":null}]}'],
)
def test_refuses_duplicate_keys_at_any_depth(data: bytes) -> None:
    assert "duplicate key" in refused(data)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_refuses_non_finite_constants(constant: str) -> None:
    reason = refused(b'{"a":[' + constant.encode() + b"]}")
    assert f"{constant} is not valid JSON" in reason


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1.5E+999"])
def test_refuses_numbers_that_overflow_a_double(number: str) -> None:
    assert "overflows a double" in refused(b'{"a":' + number.encode() + b"}")


def test_integers_must_survive_an_ieee_double() -> None:
    for bad in (2**53, -(2**53), 2**64):
        assert "outside +-(2^53-1)" in refused(b'{"a":%d}' % bad)
    doc = wire.loads(b'{"a":%d,"b":%d}' % (MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER), max_bytes=CAP)
    assert doc == {"a": 2**53 - 1, "b": -(2**53 - 1)}


def test_a_ten_thousand_digit_integer_is_refused_fast_without_leaking_valueerror() -> None:
    # int() would raise a plain ValueError past 4300 digits; that must not leak.
    data = b'{"a":' + b"7" * 10_000 + b"}"
    start = time.perf_counter()
    with pytest.raises(WireError, match=r"outside \+-\(2\^53-1\)"):
        wire.loads(data, max_bytes=CAP)
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b'{"a":"\\ud800"}', "$.a"),
        (b'{"a":["ok","x\\udfff"]}', "$.a[1]"),
        (b'{"\\ud800":1}', "(a key)"),
        (b'{"o":{"\\udc00k":1}}', "(a key)"),
    ],
)
def test_refuses_lone_surrogates_in_values_and_keys(data: bytes, where: str) -> None:
    reason = refused(data)
    assert "lone surrogate" in reason
    assert where in reason


def test_accepts_an_escaped_surrogate_pair() -> None:
    assert wire.loads(b'{"a":"\\ud83d\\ude00"}', max_bytes=CAP) == {"a": "\U0001f600"}


@pytest.mark.parametrize(
    "data", [b'{"a":1}{"b":2}', b'{"a":1} {"a":1}', b'{"a":1} garbage', b'{"a":1},', b"{}]"]
)
def test_refuses_trailing_data(data: bytes) -> None:
    assert "trailing data after the JSON document" in refused(data)


def nested(depth: int) -> bytes:
    """An object at depth 1 holding arrays down to `depth` levels in total."""
    inner = depth - 1
    return b'{"a":' + b"[" * inner + b"]" * inner + b"}"


def test_nesting_up_to_max_depth_is_accepted_and_one_more_is_refused() -> None:
    assert wire.loads(nested(MAX_DEPTH), max_bytes=CAP)["a"] is not None
    assert f"nesting deeper than {MAX_DEPTH} levels" in refused(nested(MAX_DEPTH + 1))


def test_custom_max_depth() -> None:
    assert wire.loads(b'{"a":{"b":1}}', max_bytes=CAP, max_depth=2) == {"a": {"b": 1}}
    assert "nesting deeper than 2 levels" in wire_reason(b'{"a":{"b":[]}}', max_depth=2)


def wire_reason(data: bytes, **kwargs: int) -> str:
    with pytest.raises(WireError) as info:
        wire.loads(data, max_bytes=CAP, **kwargs)
    return info.value.reason


@pytest.mark.parametrize("opener", [b"[", b'{"a":'])
def test_half_a_megabyte_of_openers_gives_wireerror_not_recursionerror(opener: bytes) -> None:
    # (A megabyte of "[" is over MAX_VALUES: refused before the scanner starts, below.)
    data = opener * ((512 << 10) // len(opener))
    start = time.perf_counter()
    with pytest.raises(WireError, match=f"nesting deeper than {MAX_DEPTH} levels"):
        wire.loads(data, max_bytes=2 << 20)
    assert time.perf_counter() - start < 2


@pytest.mark.parametrize(
    ("data", "kind"),
    [(b"[1,2]", "list"), (b'"s"', "str"), (b"3", "int"), (b"null", "NoneType"), (b"true", "bool")],
)
def test_refuses_a_non_object_top_level(data: bytes, kind: str) -> None:
    assert refused(data) == f"expected a JSON object, got {kind}"


@pytest.mark.parametrize("data", [b'{"a":}', b"{'a':1}", b'{"a":1,}', b'{"a":"\x01"}'])
def test_refuses_invalid_json_with_a_position(data: bytes) -> None:
    assert "invalid JSON at line 1 column" in refused(data)


def test_dumps_is_compact_utf8() -> None:
    assert wire.dumps({"a": [1, "\u00e9"], "b": None}) == '{"a":[1,"\u00e9"],"b":null}'.encode()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_dumps_refuses_non_finite_numbers(value: float) -> None:
    with pytest.raises(WireError, match="cannot serialize"):
        wire.dumps({"a": [value]})


@pytest.mark.parametrize("value", [{"a": "\ud800"}, {"\udc00": 1}])
def test_dumps_refuses_lone_surrogates(value: dict) -> None:
    with pytest.raises(WireError, match="cannot serialize"):
        wire.dumps(value)


# --- property: what dumps writes, loads reads back identically ---------------------

safe_ints = st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | safe_ints | finite_floats | text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(text, children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_dumps_then_loads_round_trips(value: object) -> None:
    doc = {"v": value}
    data = wire.dumps(doc)
    back = wire.loads(data, max_bytes=len(data))
    assert back == doc
    # Identical bytes too (equality alone would let 1 == 1.0 or -0.0 == 0.0 pass).
    assert wire.dumps(back) == data
    assert json.loads(data) == doc


# --- the value cap, and where a refusal points -----------------------------------------


def values_in(value: object) -> int:
    if isinstance(value, dict):
        return 1 + sum(values_in(child) for child in value.values())
    if isinstance(value, list):
        return 1 + sum(values_in(child) for child in value)
    return 1


def test_max_values_counts_every_value_and_can_only_lower_the_cap() -> None:
    data = b'{"a": [1, "x", null, {}], "b": {"c": []}}'  # 8 values with the top object
    assert wire.loads(data, max_bytes=CAP, max_values=8)["b"] == {"c": []}
    with pytest.raises(wire.WireTooLarge, match="more than 7 values"):
        wire.loads(data, max_bytes=CAP, max_values=7)
    assert wire.MAX_VALUES == 1_000_000
    over = b'{"a":[' + b"0," * wire.MAX_VALUES + b"0]}"
    with pytest.raises(wire.WireTooLarge, match=f"more than {wire.MAX_VALUES} values"):
        wire.loads(over, max_bytes=len(over), max_values=2 * wire.MAX_VALUES)


@pytest.mark.parametrize(
    "data",
    [b'{"a": "' + b",[{" * 50 + b'"}', b'{"a": ["\\"", ",", "\\\\", "[", "{"]}',
     b'{"a": [ ], "b": { }, "c": [""], "d": {"": ""}}'],
)  # fmt: skip
def test_commas_and_brackets_inside_strings_are_not_values(data: bytes) -> None:
    exact = values_in(json.loads(data))
    assert wire.loads(data, max_bytes=CAP, max_values=exact) == json.loads(data)
    with pytest.raises(wire.WireTooLarge):
        wire.loads(data, max_bytes=CAP, max_values=exact - 1)


awkward_text = st.text(st.sampled_from(list(',[]{}"\\ \n:ae\u00e9')), max_size=8)
awkward_values = st.recursive(
    st.none() | safe_ints | awkward_text,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(awkward_text, kids, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(awkward_values, st.sampled_from([None, 1]), st.sampled_from([1, 2, 3, 7, 64, 1 << 18]))
def test_the_value_count_is_exact_whatever_the_strings_hold(
    value: object, indent: int | None, window: int
) -> None:
    data = json.dumps({"v": value}, indent=indent, ensure_ascii=False).encode()
    assert wire._count_values(data, window) == values_in({"v": value})


@pytest.mark.parametrize(
    ("data", "path", "problem"),
    [
        (b'{"x":{"b":1,"b":1}}', "$.x.b", "duplicate key 'b' in an object"),
        (b'{"a":[1,NaN]}', "$.a[1]", "NaN is not valid JSON"),
        (b'{"a":[{"n":9007199254740993}]}', "$.a[0].n", "integer 9007199254740993 is outside"),
        (b'{"a":{"f":[1e999]}}', "$.a.f[0]", "number 1e999 overflows a double"),
        (b'{"a":[{"b":"\\ud800"}]}', "$.a[0].b", "a lone surrogate (\\ud800) in a string"),
        (b'{"a":[{"\\udc00":1}]}', "$.a[0]", "a lone surrogate (\\udc00) in a string (a key)"),
        (b'{"a":[[[{"b":[[]]}]]]}', "$.a[0][0][0].b", "nesting deeper than 5 levels"),
    ],
)
def test_a_refusal_names_the_place_of_the_value_at_fault(data: bytes, path: str,
                                                         problem: str) -> None:  # fmt: skip
    with pytest.raises(WireError) as info:
        wire.loads(data, max_bytes=CAP, max_depth=5)
    assert info.value.path == path
    assert info.value.problem.startswith(problem)
    assert info.value.reason == f"{info.value.problem} at {path}"


def test_a_place_shows_a_key_that_cannot_print_escaped_and_a_long_one_cut() -> None:
    data = b'{"\\u001b[31m":{"' + b"k" * 100 + b'":[NaN]}}'
    with pytest.raises(WireError) as info:
        wire.loads(data, max_bytes=CAP)
    assert info.value.path == "$.'\\x1b[31m'." + "k" * 40 + "[0]"


def test_a_refusal_without_a_single_place_has_no_path() -> None:
    with pytest.raises(WireError) as info:
        wire.loads(b'{"a":1} {}', max_bytes=CAP)
    assert info.value.path is None and info.value.problem == info.value.reason


def test_numbers_are_checked_in_a_large_document_too() -> None:
    # Past the bytes where the scanner's own int and float are used, a number that
    # breaks a rule still makes the document take the checking hooks.
    filler = b",".join([b"1.5"] * 100_000)
    for bad, reason in ((b"9007199254740993", "outside"), (b"2e308", "overflows"),
                        (b"1E+400", "overflows")):  # fmt: skip
        data = b'{"a":[' + filler + b"," + bad + b"]}"
        with pytest.raises(WireError, match=reason) as info:
            wire.loads(data, max_bytes=len(data))
        assert info.value.path == "$.a[100000]"
    # A string that only looks like a big number costs the hooks, not a refusal.
    data = b'{"s":"9007199254740993 and 1e999","a":[' + filler + b"]}"
    assert len(wire.loads(data, max_bytes=len(data))["a"]) == 100_000
