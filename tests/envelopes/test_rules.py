"""envelopes.rules: each rule is written once, so its readings must agree: the published
pattern with the check a worker runs without `re`, and the models' wording with the file
rules' (both are rules.path_problem)."""

from __future__ import annotations

import base64
import re

import pytest
from pydantic import ValidationError

from envelopes import files, rules, v1


def test_the_path_forbidden_class_is_the_control_bidi_and_backslash_rule() -> None:
    forbidden = re.compile(f"[{rules.PATH_FORBIDDEN_CLASS}]")
    for code in [*range(0x3000), 0xFEFF, 0x10FFFF]:
        if 0xD800 <= code <= 0xDFFF:
            continue
        char = chr(code)
        expected = rules.is_control(code) or char in rules.BIDI_CONTROLS or char == "\\"
        assert (forbidden.fullmatch(char) is not None) is expected, hex(code)


SAMPLES_BASE64 = ["", "YQ==", "YWI=", "YWJj", "YQ", "YQ=", "Y===", "====", "YQ==YQ==", "YW=j",
                  "ab!=", "a b=", "+/+/", "-_-_", "YWJj\n", "é===", "YWJjZA=="]  # fmt: skip


@pytest.mark.parametrize("text", SAMPLES_BASE64)
def test_base64_check_agrees_with_the_published_pattern(text: str) -> None:
    by_pattern = re.fullmatch(rules.BASE64_PADDED_PATTERN.strip("^$"), text) is not None
    assert rules.is_padded_base64(text) is by_pattern
    if by_pattern:
        assert rules.base64_decoded_size(text) == len(base64.b64decode(text, validate=True))


@pytest.mark.parametrize(
    "path",
    ["", "/a", "a/", "a//b", "a/../b", "./a", "a\x00", "a\x1b", "a\\b", "a\u202eb", "a\ud800",
     "x" * 256, "a/" + "é" * 128, "/".join(["x" * 200] * 6), "/".join(["é" * 100] * 6)],
)  # fmt: skip
def test_the_model_and_the_file_rules_word_a_path_refusal_alike(path: str) -> None:
    problem = files.path_problem(path)
    assert problem is not None and problem == rules.path_problem(path)
    with pytest.raises(ValidationError) as refused:
        v1.InputFile(path=path, content="")
    assert f"path {problem}" in str(refused.value)


@pytest.mark.parametrize("pattern", ["a[b]", "out/]", "../*", "*\n", "a//*"])
def test_the_model_and_the_file_rules_word_a_pattern_refusal_alike(pattern: str) -> None:
    problem = files.glob_problem(pattern)
    assert problem is not None
    with pytest.raises(ValidationError) as refused:
        v1.Collect(patterns=[pattern])
    assert f"pattern {problem}" in str(refused.value)


def test_base64_refusals_are_worded_alike_by_the_model_and_the_file_rules() -> None:
    for content in ("abc", "ab!="):
        problem = rules.base64_problem(content)
        assert problem is not None
        checked = files.check_files([{"path": "a", "content": content, "encoding": "base64"}])
        assert checked == f"files[0].content: {problem}"
        with pytest.raises(ValidationError, match=re.escape(f"content: {problem}")):
            v1.InputFile(path="a", content=content, encoding="base64")


@pytest.mark.parametrize(
    "value",
    [{"k" * (rules.MAX_KEY + 1): 1}, [0] * (rules.MAX_ITEMS + 1), 2**53, float("nan"), {1, 2}],
    ids=["long key", "many items", "big integer", "nan", "set"],
)
def test_json_bounds_are_one_check_for_the_model_and_the_fast_path(value: object) -> None:
    problem = rules.json_bounds_problem(value)
    assert problem is not None and not rules.json_bounded(value)
    with pytest.raises(ValidationError, match=re.escape(problem)):
        v1.JsonOutput(content=value)


def test_tokens_derive_the_published_patterns() -> None:
    # The schemas carry these strings (tests/envelopes/test_schemas.py keeps them equal to
    # the committed files): written as character sets once, spelled as patterns here.
    assert rules.ID_PATTERN == r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
    assert rules.WORKER_VERSION_PATTERN == r"^[A-Za-z0-9][A-Za-z0-9.+_-]*$"
    assert rules.VERSION_PATTERN == r"^(?:0|[1-9][0-9]{0,3})\.(?:0|[1-9][0-9]{0,3})$"
    assert len("9999.9999") == rules.MAX_VERSION_LENGTH
    assert rules.MAX_MIME_LENGTH == 193
