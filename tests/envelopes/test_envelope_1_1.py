"""Envelope 1.1's members (docs/envelope-v1.md, section 11): every bound and refusal,
through the models and through the published 1.1 JSON Schema, which must agree; and the
version rules (a 1.1 member in a 1.0 request is ignored, in a 1.0 result refused)."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel, ValidationError

from envelopes import codec, rules, schema, wire
from envelopes import files as stdlib_files
from envelopes.codec import MalformedOutput
from envelopes.v1 import (
    RUNNER_ONLY_MEMBERS,
    Collect,
    DescribeResult,
    ErrorInfo,
    EventBudget,
    InputFile,
    MediaOutput,
    MixedOutput,
    StreamEvent,
    TextOutput,
    ToolCallRequest,
    ToolCallResult,
    base64_decoded_size,
    is_padded_base64,
    media_parts,
    path_key,
    runner_only_problem,
    version_at_least,
)

REQUEST: dict[str, Any] = {
    "kind": "ToolCallRequest",
    "version": "1.1",
    "id": "call-1",
    "tool": {"name": "t"},
    "arguments": {},
    "deadline_ms": 1,
    "limits": {"max_result_bytes": 4096},
}
MEDIA: dict[str, Any] = {"type": "media", "mime_type": "image/png", "base64_data": "iVBORw0KGgo="}
DESCRIBE: dict[str, Any] = {
    "kind": "DescribeResult",
    "version": "1.1",
    "worker": {"name": "w", "version": "1"},
    "supported_versions": ["1.0", "1.1"],
    "tools": [],
}
MODELS: dict[str, type[BaseModel]] = {
    "tool-call-request": ToolCallRequest,
    "tool-call-result": ToolCallResult,
    "describe-result": DescribeResult,
    "event": StreamEvent,
}


def request(**changes: Any) -> dict[str, Any]:
    return {**REQUEST, **changes}


def ok_result(output: dict[str, Any], version: str = "1.1") -> dict[str, Any]:
    return {
        "kind": "ToolCallResult",
        "version": version,
        "id": "call-1",
        "status": "ok",
        "output": output,
    }


def error_result(version: str = "1.1", **error: Any) -> dict[str, Any]:
    body = {"code": "WORKER_TIMEOUT", "message": "deadline", "retryable": True, **error}
    return {
        "kind": "ToolCallResult",
        "version": version,
        "id": "call-1",
        "status": "error",
        "error": body,
    }


def model_problem(name: str, doc: dict[str, Any]) -> str | None:
    """The model's refusal of `doc` (its first error, located), or None."""
    try:
        MODELS[name].model_validate(doc)
    except ValidationError as exc:
        return codec.describe_validation_error(exc, limit=1)
    return None


def schema_accepts(name: str, doc: dict[str, Any]) -> bool:
    version = schema.schema_version_for(doc.get("version", "1.1"))
    return jsonschema.Draft202012Validator(schema.load(name, version)).is_valid(doc)


def refused_by_both(name: str, doc: dict[str, Any], *fragments: str) -> str:
    """Both the model and the schema refuse `doc`; the model's message names each fragment."""
    data = wire.dumps(doc)
    doc = wire.loads(data, max_bytes=len(data))  # what a reader would see
    problem = model_problem(name, doc)
    assert problem is not None, f"the model accepts {json.dumps(doc)[:300]}"
    assert not schema_accepts(name, doc), f"the schema accepts {json.dumps(doc)[:300]}"
    for fragment in fragments:
        assert fragment in problem, problem
    return problem


def accepted_by_both(name: str, doc: dict[str, Any]) -> None:
    data = wire.dumps(doc)
    doc = wire.loads(data, max_bytes=len(data))
    assert model_problem(name, doc) is None
    assert schema_accepts(name, doc)


def refused_by_the_model_only(name: str, doc: dict[str, Any], *fragments: str) -> None:
    """A rule JSON Schema cannot state (a sum, a comparison between items, UTF-8 bytes):
    the schema lets it through, the model (and so every reader of this package) refuses."""
    problem = model_problem(name, doc)
    assert problem is not None
    assert schema_accepts(name, doc)
    for fragment in fragments:
        assert fragment in problem, problem


def files(*entries: dict[str, Any]) -> dict[str, Any]:
    return request(files=list(entries))


def file(path: str = "data/in.csv", **changes: Any) -> dict[str, Any]:
    return {"path": path, "content": "a,b\n1,2\n", **changes}


# --- paths: one rule set for input files, media paths and (with wildcards) patterns ------------

#: (path, the words of the model's refusal)
BAD_PATHS = [
    ("", "path is empty"),
    ("/etc/passwd", "absolute"),
    ("/", "absolute"),
    ("..", "'..' component"),
    ("../x", "'..' component"),
    ("a/../../x", "'..' component"),
    ("a/..", "'..' component"),
    (".", "'.' component"),
    ("./a", "'.' component"),
    ("a/./b", "'.' component"),
    ("a//b", "empty component"),
    ("a/", "ends with '/'"),
    ("a\x00b", "NUL"),
    ("a\x1b[31m", "control character (U+001B)"),
    ("a\nb", "control character (U+000A)"),
    ("a\tb", "control character (U+0009)"),
    ("a\x7fb", "control character (U+007F)"),
    ("a\x85b", "control character (U+0085)"),
    ("a\\b", "backslash"),
    ("..\\x", "backslash"),
    ("evil\u202etxt.exe", "bidirectional-text control (U+202E)"),
    ("a\u2066b", "bidirectional-text control (U+2066)"),
    ("a\u061cb", "bidirectional-text control (U+061C)"),
    ("a\u200fb", "bidirectional-text control (U+200F)"),
    ("x" * 256, "component 1 is 256 bytes"),
    ("a/" + "x" * 256, "component 2 is 256 bytes"),
    ("/".join(["x" * 200] * 6), "longer than 1024 bytes"),
]
GOOD_PATHS = [
    "a",
    "data/in.csv",
    ".hidden",
    "..x",
    "...",
    "a..b/c.d",
    "x" * 255,
    "/".join(["x" * 204] * 5),  # 1024 bytes exactly
    "with space/and-dash_under.score",
    "caf\u00e9/\u00fcber",
    "*?[]:@!$&'()+,;=",  # ordinary characters in a path (wildcards only in patterns)
    "emoji-\U0001f600",
]


GOOD_PATTERNS = ["out/*.png", "report.txt", "**/*.csv", "a/**/b", "?", "*", "**", "a*b?c/.x*"]
BAD_PATTERNS = [
    ("[ab].txt", "bracket expressions are not supported"),
    ("a]", "bracket expressions are not supported"),
    ("/out/*", "absolute"),
    ("../*", "'..' component"),
    ("out/./x", "'.' component"),
    ("out//x", "empty component"),
    ("out/", "ends with '/'"),
    ("out\\*", "backslash"),
    ("*\x00", "NUL"),
    ("", "pattern is empty"),
]


@pytest.mark.parametrize(("path", "words"), BAD_PATHS, ids=[repr(p[:20]) for p, _ in BAD_PATHS])
def test_bad_paths_are_refused_in_input_files_by_model_and_schema(path: str, words: str) -> None:
    refused_by_both("tool-call-request", files(file("ok"), file(path)), "files.1.path", words)


@pytest.mark.parametrize(("path", "words"), BAD_PATHS, ids=[repr(p[:20]) for p, _ in BAD_PATHS])
def test_bad_paths_are_refused_in_media_parts_by_model_and_schema(path: str, words: str) -> None:
    output = {"type": "mixed", "parts": [{"type": "text", "content": "x"}, {**MEDIA, "path": path}]}
    refused_by_both("tool-call-result", ok_result(output), "output.mixed.parts.1.media.path", words)


@pytest.mark.parametrize("path", GOOD_PATHS, ids=[repr(p[:20]) for p in GOOD_PATHS])
def test_good_paths_are_accepted_everywhere(path: str) -> None:
    accepted_by_both("tool-call-request", files(file(path)))
    accepted_by_both("tool-call-result", ok_result({**MEDIA, "path": path}))
    if "[" not in path:
        accepted_by_both("tool-call-request", request(collect={"patterns": [path]}))


def test_byte_lengths_are_the_models_the_schema_counts_characters() -> None:
    # 150 ASCII and 40 three-byte characters: 270 bytes in one component, 190 characters
    # (the schema's own multibyte rules catch 128 two-byte or 86 three-byte characters).
    refused_by_the_model_only(
        "tool-call-request",
        files(file("a" * 150 + "\u20ac" * 40)),
        "component 1 is 270 bytes of UTF-8",
    )
    for component in ("\u00e9" * 128, "\u20ac" * 86):
        refused_by_both("tool-call-request", files(file(component)), "bytes of UTF-8")
    long_path = "/".join(["\u00e9" * 100] * 6)  # 605 characters, 1205 bytes
    refused_by_the_model_only("tool-call-request", files(file(long_path)), "1205 bytes of UTF-8")


def test_a_lone_surrogate_in_a_path_is_refused() -> None:
    # wire.loads refuses an escaped lone surrogate; a path built in Python is caught too.
    with pytest.raises(ValidationError, match="lone surrogate"):
        InputFile(path="a\ud800", content="")


def test_the_models_path_rules_agree_with_envelopes_files() -> None:
    # envelopes.files is the workers' standard-library twin of these rules.
    for path, _ in BAD_PATHS:
        assert stdlib_files.path_problem(path) is not None, repr(path)
        assert stdlib_files.glob_problem(path) is not None, repr(path)
    for path in GOOD_PATHS:
        assert stdlib_files.path_problem(path) is None, repr(path)
    for pattern in GOOD_PATTERNS:
        assert stdlib_files.glob_problem(pattern) is None, pattern
    for pattern, _ in BAD_PATTERNS:
        assert stdlib_files.glob_problem(pattern) is not None, pattern


# --- input files -------------------------------------------------------------------


def test_a_full_input_file_round_trips() -> None:
    doc = file(content=base64.b64encode(b"\x00\xff").decode(), encoding="base64", mode=0o755)
    model = ToolCallRequest.model_validate(request(files=[doc]))
    assert model.files is not None
    (loaded,) = model.files
    assert (loaded.data(), loaded.size, loaded.mode) == (b"\x00\xff", 2, 0o755)
    assert model.to_wire()["files"] == [doc]
    assert model.version == "1.1"


def test_input_file_defaults_are_utf8_and_0644() -> None:
    loaded = InputFile.model_validate({"path": "r.txt", "content": "h\u00e9"})
    assert (loaded.encoding, loaded.mode, loaded.size, loaded.data()) == (
        "utf-8",
        0o644,
        3,
        "h\u00e9".encode(),
    )


@pytest.mark.parametrize(
    "content", ["QUJD=", "QUI", "QQ=", "Q===", "QU JD", "QUJD\n", "QUJD-_==", "=QUJ", "QU=D"]
)
def test_bad_base64_is_refused(content: str) -> None:
    doc = files(file(content=content, encoding="base64"))
    # "QUJD\n" too: the schema's `not` refuses the final LF Python's `$` matches before.
    refused_by_both("tool-call-request", doc, "files.0", "not base64")


@pytest.mark.parametrize("content", ["", "QQ==", "QUI=", "QUJD", "iVBORw0KGgo=", "+/+/"])
def test_good_base64_is_accepted_and_sized(content: str) -> None:
    accepted_by_both("tool-call-request", files(file(content=content, encoding="base64")))
    assert base64_decoded_size(content) == len(base64.b64decode(content))
    assert is_padded_base64(content)
    assert re.fullmatch(rules.BASE64_PADDED_PATTERN, content)


def test_base64_rules_do_not_apply_to_utf8_content() -> None:
    accepted_by_both("tool-call-request", files(file(content="not base64 at all!")))


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"mode": -1}, "greater than or equal to 0"),
        ({"mode": 512}, "less than or equal to 511"),
        ({"mode": 0o4755}, "less than or equal to 511"),  # setuid
        ({"mode": 0o2755}, "less than or equal to 511"),  # setgid
        ({"mode": 0o1777}, "less than or equal to 511"),  # sticky
        ({"mode": "420"}, "valid integer"),
        ({"mode": True}, "valid integer"),
        ({"encoding": "latin-1"}, "'utf-8' or 'base64'"),
        ({"encoding": "UTF-8"}, "'utf-8' or 'base64'"),
        ({"content": 7}, "valid string"),
        ({"content": None}, "valid string"),
    ],
)
def test_bad_file_members_are_refused(changes: dict[str, Any], words: str) -> None:
    refused_by_both("tool-call-request", files(file(**changes)), "files.0.", words)


def test_known_difference_an_integral_float_mode() -> None:
    # JSON Schema counts 420.0 as an integer; the strict models (everywhere in v1) do not.
    refused_by_the_model_only("tool-call-request", files(file(mode=420.0)), "valid integer")


def test_a_file_without_path_or_content_is_refused() -> None:
    refused_by_both("tool-call-request", files({"content": ""}), "files.0.path", "required")
    refused_by_both("tool-call-request", files({"path": "a"}), "files.0.content", "required")


def test_unknown_members_of_a_file_are_ignored() -> None:
    accepted_by_both("tool-call-request", files(file(owner="root")))


@pytest.mark.parametrize(
    ("paths", "words"),
    [
        (["a", "a"], "files[1].path duplicates files[0].path (equal)"),
        (["x", "Readme.md", "README.MD"], "files[2].path duplicates files[1].path (equal ignoring"),
        (["stra\u00dfe", "STRASSE"], "files[1].path duplicates files[0].path"),  # casefold
        (["caf\u00e9", "cafe\u0301"], "files[1].path duplicates files[0].path"),  # NFC
        (["a", "a/b"], "files[1].path is inside files[0].path, which is a file"),
        (["a/b/c", "a/b"], "files[0].path is inside files[1].path"),
        (["d/x", "D"], "files[0].path is inside files[1].path"),
    ],
)
def test_duplicates_and_a_file_inside_another_are_refused(paths: list[str], words: str) -> None:
    refused_by_the_model_only("tool-call-request", files(*map(file, paths)), "files:", words)


FILE_CASES = [
    [file("a"), file("A")],
    [file("a"), file("a/b")],
    [file("x/y"), file("X")],
    [file("stra\u00dfe"), file("STRASSE")],
    [file("caf\u00e9"), file("cafe\u0301")],
    [file("a/b"), file("a/c"), file("ab")],
    *[[file(content=c, encoding="base64")] for c in ["QUJD=", "QQ=", "Q===", "QU=D", "", "QUI="]],
    [file(mode=m) for m in [0, 0o777]],
    [file(mode=0o1000)],
    [file(encoding="utf-16")],
    [file(f"f{i}") for i in range(65)],
]


@pytest.mark.parametrize("entries", FILE_CASES)
def test_the_models_file_rules_agree_with_envelopes_files(entries: list[dict[str, Any]]) -> None:
    by_model = model_problem("tool-call-request", files(*entries)) is None
    by_stdlib = isinstance(stdlib_files.check_files(entries), list)
    assert by_model == by_stdlib, (by_model, stdlib_files.check_files(entries))


def test_siblings_and_shared_prefixes_are_fine() -> None:
    accepted_by_both("tool-call-request", files(*map(file, ["a/b", "a/c", "ab", "a.b/c", "a/bc"])))


def test_the_file_count_is_capped() -> None:
    many = [file(f"f{i}") for i in range(rules.FILES_MAX_COUNT)]
    accepted_by_both("tool-call-request", request(files=many))
    refused_by_both(
        "tool-call-request",
        request(files=[*many, file("one-more")]),
        "files:",
        f"at most {rules.FILES_MAX_COUNT} items",
    )


def test_the_decoded_total_is_capped() -> None:
    half = rules.FILES_MAX_BYTES // 2
    exact = [file("a", content="x" * half), file("b", content="y" * half)]
    assert ToolCallRequest.model_validate(request(files=exact)).files is not None
    over = [file("a", content="x" * half), file("b", content="\u00e9" * (half // 2) + "z")]
    problem = model_problem("tool-call-request", request(files=over))
    assert problem is not None
    assert f"{rules.FILES_MAX_BYTES + 1} bytes decoded in total" in problem
    # Base64 counts decoded bytes: 3 bytes per 4 characters.
    encoded = base64.b64encode(b"\x00" * (rules.FILES_MAX_BYTES - half + 3)).decode()
    over = [file("a", content="x" * half), file("b", content=encoded, encoding="base64")]
    problem = model_problem("tool-call-request", request(files=over))
    assert problem is not None and f"{rules.FILES_MAX_BYTES + 3} bytes" in problem


def test_utf8_content_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"content\n.*valid string"):
        InputFile(path="a", content="x\udc80")


# --- collect ------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", GOOD_PATTERNS)
def test_glob_patterns_are_accepted(pattern: str) -> None:
    accepted_by_both("tool-call-request", request(collect={"patterns": [pattern]}))


@pytest.mark.parametrize(("pattern", "words"), BAD_PATTERNS)
def test_bad_glob_patterns_are_refused(pattern: str, words: str) -> None:
    doc = request(collect={"patterns": ["ok", pattern]})
    refused_by_both("tool-call-request", doc, "collect.patterns.1", words)


def test_collect_defaults_and_caps() -> None:
    loaded = Collect.model_validate({"patterns": ["*"]})
    assert (loaded.max_files, loaded.max_bytes) == (64, 16 * 1024 * 1024)
    top = {
        "patterns": ["*"] * 64,
        "max_files": rules.COLLECT_MAX_FILES_CEILING,
        "max_bytes": rules.COLLECT_MAX_BYTES_CEILING,
    }
    accepted_by_both("tool-call-request", request(collect=top))
    for changes, words in [
        ({"patterns": []}, "at least 1 item"),
        ({"patterns": ["*"] * 65}, "at most 64 items"),
        ({"patterns": "*"}, "valid list"),
        ({"max_files": 0}, "greater than or equal to 1"),
        ({"max_files": 1025}, "less than or equal to 1024"),
        ({"max_bytes": 0}, "greater than or equal to 1"),
        ({"max_bytes": 64 * 1024 * 1024 + 1}, "less than or equal to 67108864"),
    ]:
        refused_by_both("tool-call-request", request(collect={**top, **changes}), words)
    refused_by_both("tool-call-request", request(collect={}), "collect.patterns", "required")


# --- events -------------------------------------------------------------------------


def test_event_budget_defaults_and_caps() -> None:
    loaded = EventBudget.model_validate({})
    assert (loaded.max_per_second, loaded.max_bytes) == (20, 1024 * 1024)
    accepted_by_both("tool-call-request", request(events={}))
    accepted_by_both("tool-call-request", request(events={"max_per_second": 1000, "max_bytes": 1}))
    for changes, words in [
        ({"max_per_second": 0}, "greater than or equal to 1"),
        ({"max_per_second": 1001}, "less than or equal to 1000"),
        ({"max_bytes": 8 * 1024 * 1024 + 1}, "less than or equal to 8388608"),
        ({"max_bytes": 0}, "greater than or equal to 1"),
    ]:
        refused_by_both("tool-call-request", request(events=changes), "events.", words)


@pytest.mark.parametrize(
    "event",
    [
        {"type": "log", "stream": "stdout", "text": "line 1\nline 2"},
        {"type": "log", "stream": "stderr", "text": "x" * rules.EVENT_TEXT_MAX},
        {"type": "progress", "fraction": 0},
        {"type": "progress", "fraction": 1, "message": "m" * rules.EVENT_MESSAGE_MAX},
        {"type": "progress", "fraction": 0.25, "message": "compiling"},
        {"type": "partial", "text": "so far"},
        {"type": "dropped", "count": 3},
    ],
)
def test_valid_events(event: dict[str, Any]) -> None:
    accepted_by_both("event", event)


@pytest.mark.parametrize(
    "event",
    [
        {"type": "log", "stream": "stdin", "text": "x"},
        {"type": "log", "text": "x"},
        {"type": "log", "stream": "stdout", "text": "x" * (rules.EVENT_TEXT_MAX + 1)},
        {"type": "log", "stream": "stdout", "text": "x", "level": "info"},  # closed
        {"type": "progress", "fraction": 1.5},
        {"type": "progress", "fraction": -0.1},
        {"type": "progress", "fraction": "0.5"},
        {"type": "progress", "fraction": 0.5, "message": "m" * (rules.EVENT_MESSAGE_MAX + 1)},
        {"type": "partial", "text": "x" * (rules.EVENT_TEXT_MAX + 1)},
        {"type": "dropped", "count": 0},
        {"type": "dropped", "count": 1.5},
        {"type": "result", "text": "x"},
        {"text": "x"},
    ],
)
def test_invalid_events(event: dict[str, Any]) -> None:
    refused_by_both("event", event)


def test_event_constants_match_the_contract() -> None:
    assert rules.EVENT_RECORD_SEPARATOR == b"\x1e"
    assert (rules.EVENT_MAX_LINE_BYTES, rules.EVENT_TEXT_MAX) == (16384, 8192)
    assert rules.EVENT_TYPES == ("log", "progress", "partial", "dropped")
    assert rules.EVENTS_MAX_DELIVERED == 10000


# --- output_tail: bounded, and runner-only -----------------------------------------------


def test_output_tail_is_bounded() -> None:
    accepted_by_both("tool-call-result", error_result(output_tail="t" * rules.OUTPUT_TAIL_MAX))
    refused_by_both(
        "tool-call-result",
        error_result(output_tail="t" * (rules.OUTPUT_TAIL_MAX + 1)),
        "error.output_tail",
        "at most 65536 characters",
    )
    refused_by_both("tool-call-result", error_result(output_tail=5), "error.output_tail")


def test_fail_keeps_the_end_of_the_tail_and_speaks_1_1() -> None:
    tail = "a" * 10 + "b" * rules.OUTPUT_TAIL_MAX
    result = ToolCallResult.fail("c", "WORKER_TIMEOUT", "deadline", True, output_tail=tail)
    assert result.version == "1.1"
    assert result.error is not None and result.error.output_tail == "b" * rules.OUTPUT_TAIL_MAX
    plain = ToolCallResult.fail("c", "WORKER_TIMEOUT", "deadline", True)
    assert plain.version == "1.0" and "output_tail" not in plain.to_wire()["error"]


def test_a_worker_that_sends_output_tail_is_refused() -> None:
    model = ToolCallRequest.model_validate(request())
    sent = error_result(code="TOOL_FAILED", retryable=False, output_tail="progress...")
    with pytest.raises(MalformedOutput, match=r"error\.output_tail: may only be set by the runner"):
        codec.decode_result(wire.dumps(sent), model)
    assert RUNNER_ONLY_MEMBERS == ("error.output_tail",)
    assert runner_only_problem(ToolCallResult.model_validate(sent)) is not None
    fine = ToolCallResult.model_validate(error_result(code="TOOL_FAILED", retryable=False))
    assert runner_only_problem(fine) is None
    assert codec.decode_result(wire.dumps(fine.to_wire()), model) == fine


def test_runner_codes_are_still_named_as_runner_only() -> None:
    result = ToolCallResult.model_validate(error_result())
    assert (
        runner_only_problem(result)
        == "error.code: WORKER_TIMEOUT may only be produced by the runner"
    )


# --- media paths --------------------------------------------------------------------


def test_media_paths_round_trip_and_are_found_at_any_depth() -> None:
    inner = {"type": "mixed", "parts": [{**MEDIA, "path": "out/b.png"}]}
    output = {"type": "mixed", "parts": [{"type": "text", "content": "x"}, inner, MEDIA]}
    result = ToolCallResult.model_validate(ok_result(output))
    assert result.to_wire() == ok_result(output)
    found = [(where, part.path) for where, part in media_parts(result.output)]
    assert found == [("output.parts[1].parts[0]", "out/b.png"), ("output.parts[2]", None)]
    assert result.members_after_1_0() == ["output.parts[1].parts[0].path"]


def test_duplicate_media_paths_are_refused() -> None:
    parts = [{**MEDIA, "path": "out/A.png"}, {**MEDIA, "path": "out/a.png"}]
    refused_by_the_model_only(
        "tool-call-result",
        ok_result({"type": "mixed", "parts": parts}),
        "output.parts[1].path: duplicates output.parts[0].path",
    )


def test_ok_picks_1_1_when_a_media_part_has_a_path() -> None:
    part = MediaOutput(mime_type="image/png", base64_data="", path="a.png")
    assert ToolCallResult.ok("c", part).version == "1.1"
    assert ToolCallResult.ok("c", MixedOutput(parts=[TextOutput(content="x")])).version == "1.0"
    with pytest.raises(ValidationError, match=r"added in 1\.1"):
        ToolCallResult.ok("c", MixedOutput(parts=[part]), "1.0")


# --- capabilities ---------------------------------------------------------------------


def test_capabilities_bounds() -> None:
    accepted_by_both("describe-result", {**DESCRIBE, "capabilities": ["files", "events"]})
    accepted_by_both("describe-result", {**DESCRIBE, "capabilities": []})
    accepted_by_both("describe-result", {**DESCRIBE, "capabilities": ["x-1_y", "a" * 32]})
    many = [f"c{i}" for i in range(rules.MAX_CAPABILITIES)]
    accepted_by_both("describe-result", {**DESCRIBE, "capabilities": many})
    for capabilities, words in [
        ([*many, "one-more"], "at most 16 items"),
        (["files", "files"], "each may appear once"),
        (["Files"], "pattern"),
        (["1files"], "pattern"),
        (["-x"], "pattern"),
        (["a" * 33], "at most 32 characters"),
        (["fi les"], "pattern"),
        ([""], "pattern"),
        ("files", "valid list"),
        ([7], "valid string"),
    ]:
        doc = {**DESCRIBE, "capabilities": capabilities}
        refused_by_both("describe-result", doc, "capabilities", words)


def test_capabilities_constants() -> None:
    assert {rules.CAPABILITY_FILES, rules.CAPABILITY_EVENTS} == rules.KNOWN_CAPABILITIES
    assert (rules.CAPABILITY_FILES, rules.CAPABILITY_EVENTS) == ("files", "events")
    for known in rules.KNOWN_CAPABILITIES:
        assert re.fullmatch(rules.CAPABILITY_PATTERN, known)


def test_a_describe_built_with_capabilities_speaks_1_1() -> None:
    built = DescribeResult.model_validate(
        {**DESCRIBE, "capabilities": ["files"]} | {"version": "1.1"}
    )
    assert built.capabilities == ["files"]
    without_version = {k: v for k, v in DESCRIBE.items() if k != "version"}
    assert (
        DescribeResult.model_validate({**without_version, "capabilities": ["x"]}).version == "1.1"
    )
    assert DescribeResult.model_validate(without_version).version == "1.0"


# --- versions: 1.1 members in a 1.0 document ------------------------------------------------


def test_a_1_0_request_ignores_1_1_members_even_invalid_ones() -> None:
    doc = request(
        version="1.0",
        files=[{"path": "../../etc/passwd", "content": 7}],
        collect={"patterns": []},
        events={"max_per_second": 0},
    )
    loaded = ToolCallRequest.model_validate(doc)
    assert (loaded.files, loaded.collect, loaded.events) == (None, None, None)
    assert loaded.to_wire() == request(version="1.0")
    accepted_by_both("tool-call-request", doc)  # the 1.0 schema is open: must-ignore
    decoded = codec.decode_request(wire.dumps(doc))
    assert isinstance(decoded, ToolCallRequest) and decoded.files is None


def test_a_request_built_with_1_1_members_speaks_1_1() -> None:
    base = {k: v for k, v in REQUEST.items() if k != "version"}
    assert ToolCallRequest.model_validate({**base, "events": {}}).version == "1.1"
    assert ToolCallRequest.model_validate({**base, "files": None}).version == "1.0"
    later = ToolCallRequest.model_validate({**REQUEST, "version": "1.7", "events": {}})
    assert later.events == EventBudget()


@pytest.mark.parametrize(
    ("name", "doc", "where"),
    [
        ("tool-call-result", ok_result({**MEDIA, "path": "a.png"}, "1.0"), "output.path"),
        ("tool-call-result", ok_result({**MEDIA, "path": None}, "1.0"), "output.path"),
        (
            "tool-call-result",
            ok_result({"type": "mixed", "parts": [MEDIA, {**MEDIA, "path": "a"}]}, "1.0"),
            "output.parts[1].path",
        ),
        ("tool-call-result", error_result("1.0", output_tail="x"), "error.output_tail"),
        ("describe-result", {**DESCRIBE, "version": "1.0", "capabilities": []}, "capabilities"),
    ],
)
def test_a_1_0_result_or_describe_refuses_1_1_members(
    name: str, doc: dict[str, Any], where: str
) -> None:
    refused_by_both(name, doc, f"{where}: added in 1.1, not a member of a version 1.0 result")


def test_the_1_0_schemas_know_nothing_of_1_1() -> None:
    text = "".join(json.dumps(schema.load(name, "1.0")) for name in schema.build_all("1.0"))
    for member in ("files", "collect", "events", "output_tail", "capabilities", '"path"'):
        assert member not in text, member
    later = "".join(json.dumps(schema.load(name, "1.1")) for name in schema.build_all("1.1"))
    for member in ("InputFile", "Collect", "EventBudget", "output_tail", "capabilities"):
        assert member in later, member


@pytest.mark.parametrize(
    ("version", "published"),
    [
        ("1.0", "1.0"),
        ("0.9", "1.0"),
        ("1.1", "1.1"),
        ("1.10", "1.1"),
        ("7.3", "1.1"),
        (None, "1.0"),
    ],
)
def test_schema_version_for(version: object, published: str) -> None:
    assert schema.schema_version_for(version) == published


def test_version_comparison_is_numeric() -> None:
    assert version_at_least("1.10", "1.9") and version_at_least("1.1", "1.1")
    assert not version_at_least("1.0", "1.1")
    assert not version_at_least("1.x", "1.0") and not version_at_least(1.1, "1.0")


def test_negotiation_constants() -> None:
    assert rules.VERSION == "1.0"
    assert rules.LATEST_VERSION == "1.1"
    assert rules.SUPPORTED_VERSIONS == ("1.0", "1.1")


def test_path_key_folds_case_and_normalization() -> None:
    assert path_key("Caf\u00e9") == path_key("cafe\u0301") == path_key("CAFE\u0301")
    assert path_key("a/B") != path_key("a/c")


def test_error_info_accepts_output_tail_only_as_a_string() -> None:
    assert (
        ErrorInfo(code="WORKER_OOM", message="m", retryable=False, output_tail="").output_tail == ""
    )


def test_the_codec_refuses_1_1_members_and_bad_paths_from_a_worker() -> None:
    asked = ToolCallRequest.model_validate(request(version="1.0"))
    media = {"type": "mixed", "parts": [{**MEDIA, "path": "a.png"}]}
    with pytest.raises(MalformedOutput, match=r"output\.parts\[0\]\.path: added in 1\.1"):
        codec.decode_result(wire.dumps(ok_result(media, "1.0")), asked)
    asked = ToolCallRequest.model_validate(request())
    media["parts"].append({**MEDIA, "path": "../x"})
    with pytest.raises(MalformedOutput, match=r"output\.mixed\.parts\.1\.media\.path: .*'\.\.'"):
        codec.decode_result(wire.dumps(ok_result(media)), asked)
    described = {**DESCRIBE, "version": "1.0", "capabilities": ["files"]}
    with pytest.raises(MalformedOutput, match=r"capabilities: added in 1\.1"):
        codec.decode_describe_result(wire.dumps(described), 65536)


def test_empty_capabilities_built_in_python_speak_1_1_too() -> None:
    without_version = {k: v for k, v in DESCRIBE.items() if k != "version"}
    assert DescribeResult.model_validate({**without_version, "capabilities": []}).version == "1.1"
