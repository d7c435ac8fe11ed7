"""The published schemas are at least as strict as the runner (issue 34, item 1): each
hostile document a review found is refused by the schema (read as section 1.1 says, with
envelopes.schema.validator) and by the runner's codec, and every anchored pattern refuses
a trailing line terminator in Python's `re` (what jsonschema uses) and in JavaScript."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from envelopes import codec, events, rules, schema, wire
from envelopes.v1 import ToolCallRequest

REQUEST_1_1 = ToolCallRequest(
    id="t1",
    version="1.1",
    tool={"name": "echo"},
    arguments={},
    deadline_ms=1795000000000,
    limits={"max_result_bytes": 1 << 20},
)
MEDIA = {"type": "media", "mime_type": "image/png", "base64_data": "iVBORw0KGgo="}


def result(version: str = "1.1", **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": "ToolCallResult", "version": version, "id": "t1"}
    doc.update(status="ok", output={"type": "text", "content": "hi"})
    doc.update(changes)
    return doc


def failed(code: str, **more: Any) -> dict[str, Any]:
    error = {"code": code, "message": "m", "retryable": False, **more}
    return result(status="error", output=None, error=error) | {"output": ...}


def media(**changes: Any) -> dict[str, Any]:
    return result(output={**MEDIA, **changes})


def request(**changes: Any) -> dict[str, Any]:
    doc = REQUEST_1_1.to_wire() | {"version": "1.0"}
    doc.update(changes)
    return doc


def _clean(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if v is not ...}


def runner_refuses_result(doc: dict[str, Any]) -> str:
    request = REQUEST_1_1.model_copy(update={"version": doc["version"]})
    with pytest.raises(codec.MalformedOutput) as caught:
        codec.decode_result(wire.dumps(doc), request)
    return str(caught.value)


def worker_refuses_request(doc: dict[str, Any]) -> str:
    with pytest.raises(codec.RequestError) as caught:
        codec.decode_request(wire.dumps(doc))
    assert caught.value.code == "INVALID_REQUEST"
    return caught.value.message


def runner_refuses_event(doc: dict[str, Any]) -> str:
    problem = events.parse_line(b"\x1e" + wire.dumps(doc) + b"\n")
    assert isinstance(problem, str), problem
    return problem


ResultCheck = Callable[[dict[str, Any]], str]
#: (what, schema name, the document, how the runner reads it, a word its refusal names)
HOSTILE: list[tuple[str, str, dict[str, Any], ResultCheck, str]] = [
    ("runner code", "worker-result", _clean(failed("WORKER_OOM")), runner_refuses_result,
     "WORKER_OOM"),
    ("output_tail", "worker-result", _clean(failed("TOOL_FAILED", output_tail="x")),
     runner_refuses_result, "output_tail"),
    ("id ending in LF", "worker-result", result(id="t1\n"), runner_refuses_result, "id"),
    ("filename ending in LF", "worker-result", media(filename="evil.sh\n"),
     runner_refuses_result, "filename"),
    ("unpadded base64", "worker-result", media(base64_data="abcde"), runner_refuses_result,
     "base64_data"),
    ("padding only", "worker-result", media(base64_data="=="), runner_refuses_result,
     "base64_data"),
    ("600-byte component", "worker-result", media(path="out/" + "\u20ac" * 200),
     runner_refuses_result, "path"),
    ("path ending in LF", "worker-result", media(path="out/a.png\n"), runner_refuses_result,
     "path"),
    ("version ending in LF", "worker-result", result(version="1.1\n"), runner_refuses_result,
     "version"),
    ("integer written 4096.0", "tool-call-request", request(limits={"max_result_bytes": 4096.0}),
     worker_refuses_request, "max_result_bytes"),
    ("integer written 4.096e3", "tool-call-request",
     request(deadline_ms=1.795e12), worker_refuses_request, "deadline_ms"),
    ("request id ending in LF", "tool-call-request", request(id="t1\n"),
     worker_refuses_request, "id"),
    ("event count 2.0", "event", {"type": "dropped", "count": 2.0}, runner_refuses_event,
     "count"),
]  # fmt: skip

#: What JSON Schema cannot say (uniqueness up to case folding, a byte count that mixes
#: one- and three-byte characters): the prose says it (sections 11.2, 11.4) and the code
#: enforces it. Pinned, so the list only shrinks.
SCHEMA_CANNOT: list[tuple[str, dict[str, Any], str]] = [
    ("media paths equal ignoring case",
     result(output={"type": "mixed", "parts": [{**MEDIA, "path": "a.png"},
                                               {**MEDIA, "path": "A.PNG"}]}), "duplicates"),
    ("a 270-byte component of mixed widths", media(path="a" * 150 + "\u20ac" * 40), "path"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "name", "doc", "runner", "word"), HOSTILE,
                         ids=[h[0] for h in HOSTILE])  # fmt: skip
def test_hostile_document_is_refused_by_the_schema_and_by_the_runner(
    what: str, name: str, doc: dict[str, Any], runner: ResultCheck, word: str
) -> None:
    data = wire.dumps(doc)
    parsed = wire.loads(data, max_bytes=len(data))  # 4096.0 stays a float, as in 1.1
    version = schema.schema_version_for(parsed.get("version", "1.1").strip())
    assert not schema.validator(name, version).is_valid(parsed), what
    assert word in runner(doc), what


@pytest.mark.parametrize(("what", "doc", "word"), SCHEMA_CANNOT, ids=[c[0] for c in SCHEMA_CANNOT])
def test_what_the_schema_cannot_say_the_runner_refuses(
    what: str, doc: dict[str, Any], word: str
) -> None:
    assert schema.validator("worker-result", "1.1").is_valid(doc), f"{what}: now in the schema"
    assert word in runner_refuses_result(doc)


def test_the_full_outcome_schema_keeps_the_runner_codes_the_worker_schema_refuses() -> None:
    oom = _clean(failed("WORKER_TIMEOUT", output_tail="step 3"))
    assert schema.validator("tool-call-result", "1.1").is_valid(oom)
    assert not schema.validator("worker-result", "1.1").is_valid(oom)
    assert not schema.validator("worker-result", "1.0").is_valid(
        _clean(failed("CANCELLED") | {"version": "1.0"})
    )


# --- every anchored pattern, in Python's re and in JavaScript ------------------------

#: A value each published pattern must accept, by pattern.
SAMPLES = {
    rules.ID_PATTERN: "t1",
    rules.TOOL_NAME_PATTERN: "echo",
    rules.VERSION_PATTERN: "1.0",
    rules.EXTENSION_KEY_PATTERN: "acme.example/trace-id",
    rules.MIME_PATTERN: "image/png",
    rules.BASE64_PADDED_PATTERN: "YQ==",
    rules.FILENAME_PATTERN: "evil.sh",
    rules.WORKER_VERSION_PATTERN: "1.0.0",
    rules.PATH_PATTERN: "out/a.png",
    rules.GLOB_PATTERN: "out/*.png",
    rules.CAPABILITY_PATTERN: "files",
    rules.CRITICAL_MEMBER_PATTERN: "files",
}
TERMINATORS = ["\n", "\r", "\r\n", "\u0085", "\u2028", "\u2029"]


def string_rules(node: Any) -> Iterator[tuple[str, list[str]]]:
    """(pattern, the patterns its `not` refuses) for every string schema with a pattern."""
    if isinstance(node, list):
        for item in node:
            yield from string_rules(item)
    elif isinstance(node, dict):
        if isinstance(node.get("pattern"), str) and node["pattern"].startswith("^"):
            refused = node.get("not", {})
            yield node["pattern"], [r["pattern"] for r in refused.get("anyOf", [refused])]
        for value in node.values():
            yield from string_rules(value)


def published_rules() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for version in schema.PUBLISHED_VERSIONS:
        for name in schema.names(version):
            found.update(string_rules(schema.load(name, version)))
    return found


def accepts_in_python(pattern: str, refused: list[str], text: str) -> bool:
    # jsonschema's own reading: re.search for `pattern` and for each refused pattern.
    return re.search(pattern, text) is not None and not any(re.search(r, text) for r in refused)


def test_every_anchored_pattern_has_a_sample() -> None:
    assert set(published_rules()) == set(SAMPLES)


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node (JavaScript's RegExp)")
def test_no_engine_lets_a_trailing_line_terminator_through() -> None:
    published = published_rules()
    cases = [
        (pattern, refused, SAMPLES[pattern] + end, end == "" or (
            # The path rules admit U+2028/9 inside a name (they are not control characters).
            pattern in (rules.PATH_PATTERN, rules.GLOB_PATTERN) and end in "\u2028\u2029"))
        for pattern, refused in published.items()
        for end in ["", *TERMINATORS]
    ]  # fmt: skip
    script = (
        "const cases = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify(cases.map(([p, r, t]) => ["
        "new RegExp(p, 'u').test(t) && !r.some((x) => new RegExp(x, 'u').test(t)),"
        "new RegExp(p).test(t) && !r.some((x) => new RegExp(x).test(t))])));"
    )
    out = subprocess.run(
        ["node", "-e", script],
        input=json.dumps([[p, r, t] for p, r, t, _ in cases]),
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    in_js = json.loads(out.stdout)
    for (pattern, refused, text, expected), (with_u, without_u) in zip(cases, in_js, strict=True):
        assert accepts_in_python(pattern, refused, text) is expected, (pattern, text)
        assert with_u is expected and without_u is expected, (pattern, text)
        # And the models' reading (a full match, which pydantic's Rust regex makes).
        full = re.fullmatch(pattern.removeprefix("^").removesuffix("$"), text) is not None
        assert (full and not any(re.search(r, text) for r in refused)) is expected, text
