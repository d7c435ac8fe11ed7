"""The published JSON Schemas: no drift from the models, closed and bounded, portable,
and in agreement with the pydantic models on what they accept."""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from envelopes import schema, wire
from envelopes.v1 import (
    ERROR_CODES,
    MAX_MESSAGE,
    MAX_PARTS,
    VERSION,
    DescribeResult,
    ToolCallRequest,
    ToolCallResult,
)

SCHEMAS = Path(schema.__file__).parent / "schemas"
NAMES = [
    "tool-call-request",
    "tool-call-result",
    "describe-request",
    "describe-result",
    "worker-result",
]
#: The published files of each version: 1.1 adds the event objects of section 11.3.
NAMES_OF = {VERSION: NAMES, "1.1": [*NAMES, "event"]}
#: Every (version, name) with a committed file.
EVERY = [(version, name) for version, names in NAMES_OF.items() for name in names]
#: What a worker sends back: untrusted, so closed and bounded everywhere.
OUTBOUND = ["tool-call-result", "describe-result", "worker-result"]
OUTBOUND_EVERY = [(v, n) for v, n in EVERY if n in OUTBOUND or n == "event"]


def validator(name: str, version: str = VERSION) -> jsonschema.protocols.Validator:
    return schema.validator(name, version)


# --- drift and well-formedness -------------------------------------------------------


def test_every_version_has_its_schemas_and_nothing_else_is_there() -> None:
    assert list(schema.PUBLISHED_VERSIONS) == list(NAMES_OF) == ["1.0", "1.1"]
    assert sorted(p.name for p in SCHEMAS.iterdir()) == ["1.0", "1.1"]
    for version, names in NAMES_OF.items():
        assert sorted(schema.build_all(version)) == sorted(names)
        found = sorted(p.name for p in (SCHEMAS / version).glob("*"))
        assert found == sorted(f"{n}.json" for n in names), version


@pytest.mark.parametrize(("version", "name"), EVERY)
def test_committed_schema_matches_the_models_byte_for_byte(version: str, name: str) -> None:
    committed = (SCHEMAS / version / f"{name}.json").read_text(encoding="utf-8")
    generated = schema.dump(schema.build_all(version)[name])
    assert committed == generated, (
        f"envelopes/schemas/{version}/{name}.json is out of date with envelopes/v1.py: "
        "run scripts/gen-schemas and commit the result"
    )
    assert schema.load(name, version) == json.loads(generated)


@pytest.mark.parametrize(("version", "name"), EVERY)
def test_schema_is_valid_draft_2020_12_with_a_versioned_id(version: str, name: str) -> None:
    doc = schema.load(name, version)
    jsonschema.Draft202012Validator.check_schema(doc)
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert doc["$id"] == f"https://agents-runner.dev/schemas/envelope/{version}/{name}.json"
    assert "x-agents-runner-since" not in json.dumps(doc)  # markers never published


def walk(node: Any, path: str = "#") -> Iterator[tuple[str, Any]]:
    """Every (path, value) pair in a JSON document, depth first."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, f"{path}/{index}")


@pytest.mark.parametrize(("version", "name"), EVERY)
def test_no_remote_refs(version: str, name: str) -> None:
    doc = schema.load(name, version)
    refs = [(p, n["$ref"]) for p, n in walk(doc) if isinstance(n, dict) and "$ref" in n]
    assert all(ref.startswith("#") for _, ref in refs), refs
    assert not [p for p, n in walk(doc) if isinstance(n, dict) and "$dynamicRef" in n]
    # Every local reference resolves (a dangling one is a remote fetch for some tools).
    for where, ref in refs:
        target: Any = doc
        for part in ref.removeprefix("#/").split("/"):
            assert part in target, f"{where}: {ref} does not resolve"
            target = target[part]


#: Keywords whose value is a schema, a list of schemas, or a map of schemas.
_ONE = ("items", "additionalProperties", "unevaluatedProperties", "propertyNames", "not",
        "contains", "if", "then", "else", "unevaluatedItems")  # fmt: skip
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "dependentSchemas")


def subschemas(node: dict, path: str = "#") -> Iterator[tuple[str, dict]]:
    yield path, node
    for key in _ONE:
        if isinstance(node.get(key), dict):
            yield from subschemas(node[key], f"{path}/{key}")
    for key in _MANY:
        for index, child in enumerate(node.get(key, [])):
            yield from subschemas(child, f"{path}/{key}/{index}")
    for key in _MAP:
        for name, child in node.get(key, {}).items():
            yield from subschemas(child, f"{path}/{key}/{name}")


def is_free_json(node: dict) -> bool:
    """A JsonValue-style free object: any keys, but bounded in count and key length,
    with every value a (bounded) JsonValue."""
    return (
        isinstance(node.get("maxProperties"), int)
        and isinstance(node.get("propertyNames", {}).get("maxLength"), int)
        and node.get("additionalProperties") == {"$ref": "#/$defs/JsonValue"}
        and "properties" not in node
    )


@pytest.mark.parametrize(("version", "name"), OUTBOUND_EVERY)
def test_outbound_schemas_are_closed_and_bounded(version: str, name: str) -> None:
    problems = []
    for path, node in subschemas(schema.load(name, version)):
        kind = node.get("type")
        assert kind is None or isinstance(kind, str), f"{path}: type lists are not used"
        closed = node.get("additionalProperties") is False or (
            node.get("unevaluatedProperties") is False
        )
        if kind == "object" and not (closed or is_free_json(node)):
            problems.append(f"{path}: object neither closed nor a bounded free JSON object")
        if kind == "object" and not (closed or "maxProperties" in node):
            problems.append(f"{path}: object without maxProperties or a closed property set")
        if kind == "string" and not ({"maxLength", "const", "enum"} & node.keys()):
            problems.append(f"{path}: string without maxLength")
        if kind == "array" and "maxItems" not in node:
            problems.append(f"{path}: array without maxItems")
        # A schema with no constraint at all would let anything through.
        constraining = {"type", "$ref", "const", "enum", "anyOf", "oneOf", "allOf", "not"}
        if path.rsplit("/", 2)[-2:-1] in (["properties"], ["$defs"]) and not (
            constraining & node.keys()
        ):
            problems.append(f"{path}: unconstrained schema")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("version", "name"), [(v, n) for v, n in EVERY if n in OUTBOUND])
def test_the_walker_sees_every_property(version: str, name: str) -> None:
    # Guard for the test above: it must actually reach the nested definitions.
    paths = [p for p, _ in subschemas(schema.load(name, version))]
    assert len(paths) > 20
    assert any(p.endswith("/$defs/JsonValue") for p in paths)


@pytest.mark.parametrize(("version", "name"), EVERY)
def test_patterns_are_portable_to_ecma_262(version: str, name: str) -> None:
    doc = schema.load(name, version)
    found = [(p, n["pattern"]) for p, n in walk(doc) if isinstance(n, dict) and "pattern" in n]
    found += [
        (p, key)
        for p, n in walk(doc)
        if isinstance(n, dict)
        for key in n.get("patternProperties", {})
    ]
    if name not in ("describe-request", "event"):
        assert found
    for where, pattern in found:
        re.compile(pattern)
        assert pattern.isascii(), pattern
        # A pattern a document must match is anchored; the path rules' refusals (a `.`
        # component, a long one) are searched for anywhere, under a `not`.
        if "/not/" not in where and not where.endswith("/not"):
            assert pattern.startswith("^") and pattern.endswith("$"), pattern
        # Python-only syntax that ECMA-262 reads differently or not at all.
        for construct in (r"\A", r"\Z", r"\z", "(?P", "(?#", "(?i", "(?x", "(?s", "(?m", "\\d"):
            assert construct not in pattern, (pattern, construct)


# --- the schema and the model agree -------------------------------------------------------
#
# Known, intentional differences, which the codec closes (tests below pin them):
# - `kind` and `version` have Python defaults, so ToolCallResult.model_validate accepts a
#   document without them; the schema requires both. codec.decode_result refuses a missing
#   kind (`kind: expected ...`) and a missing version (it must equal the request's).
# - Outside the wire, the schema's JsonValue accepts Python ints beyond 2^53 (via the
#   `number` branch) and NaN; wire.loads never produces either, so the corpus goes
#   through the wire first.


def model_accepts(model: type[BaseModel], doc: dict) -> bool:
    if "kind" not in doc or "version" not in doc:
        return False  # see the first known difference above
    try:
        model.model_validate(doc)
    except ValidationError:
        return False
    return True


def assert_agree(name: str, model: type[BaseModel], doc: dict) -> bool:
    """Model and schema (of the document's version: section 8) say the same of `doc`."""
    data = wire.dumps(doc)
    doc = wire.loads(data, max_bytes=len(data))
    by_schema = validator(name, schema.schema_version_for(doc.get("version"))).is_valid(doc)
    by_model = model_accepts(model, doc)
    assert by_schema == by_model, (
        f"schema says {by_schema}, model says {by_model} for {json.dumps(doc)[:500]}"
    )
    return by_schema


OK_TEXT = {"type": "text", "content": "hi"}
ERR = {"code": "TOOL_FAILED", "message": "boom", "retryable": False}
MEDIA = {"type": "media", "mime_type": "image/png", "base64_data": "iVBORw0KGgo="}


def result(**changes: Any) -> dict:
    doc = {"kind": "ToolCallResult", "version": "1.0", "id": "call-1", "status": "ok"}
    doc["output"] = OK_TEXT
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not ...}


def error_result(**error_changes: Any) -> dict:
    return result(status="error", output=..., error={**ERR, **error_changes})


VALID_RESULTS = [
    result(),
    result(version="1.7", id="A.b:c_d-9"),
    result(output={"type": "text", "content": ""}),
    result(output={"type": "json", "content": None}),
    result(output={"type": "json", "content": {"a": [1, 2.5, "x", None, {"b": False}]}}),
    result(output={"type": "json", "content": "k" * 100}),
    result(output=MEDIA),
    result(output={**MEDIA, "filename": "plot 1.png"}),
    result(output={**MEDIA, "filename": None}),
    result(output={"type": "mixed", "parts": []}),
    result(output={"type": "mixed", "parts": [OK_TEXT, MEDIA, {"type": "mixed", "parts": []}]}),
    result(output={"type": "mixed", "parts": [OK_TEXT] * MAX_PARTS}),
    error_result(),
    error_result(message="m" * MAX_MESSAGE, retryable=True),
    *[error_result(code=code) for code in ERROR_CODES],  # runner codes: refused by the codec
]
INVALID_RESULTS = [
    result(extra=1),
    result(kind="DescribeResult"),
    result(kind=None),
    result(version="1"),
    result(version=1.0),
    result(id=""),
    result(id="a b"),
    result(id="x" * 129),
    result(id=7),
    result(status="maybe"),
    result(status=None),
    result(output=...),
    result(output=None),
    result(error=ERR),
    result(error=None),
    result(status="error"),
    result(status="error", error=ERR),
    result(status="error", output=None, error=ERR),
    error_result(code="NOPE"),
    error_result(message="m" * (MAX_MESSAGE + 1)),
    error_result(retryable="false"),
    error_result(retryable=0),
    error_result(details={}),
    result(output={"type": "text"}),
    result(output={"type": "text", "content": 1}),
    result(output={"content": "x"}),
    result(output={"type": "html", "content": "x"}),
    result(output={"type": "text", "content": "x", "more": 1}),
    result(output={"type": "json"}),
    result(output={"type": "json", "content": {"k" * 1025: 1}}),
    result(output={**MEDIA, "mime_type": "IMAGE/png"}),
    result(output={**MEDIA, "base64_data": "not base64!"}),
    result(output={**MEDIA, "filename": "../x"}),
    result(output={**MEDIA, "filename": 3}),
    result(output={"type": "mixed", "parts": [OK_TEXT] * (MAX_PARTS + 1)}),
    result(output={"type": "mixed", "parts": [{"type": "text"}]}),
    result(output={"type": "mixed", "parts": OK_TEXT}),
    result(output={"type": "mixed", "parts": [{"type": "mixed", "parts": [{"x": 1}]}]}),
]


@pytest.mark.parametrize("doc", VALID_RESULTS)
def test_schema_and_model_both_accept(doc: dict) -> None:
    assert assert_agree("tool-call-result", ToolCallResult, doc) is True


@pytest.mark.parametrize("doc", INVALID_RESULTS)
def test_schema_and_model_both_refuse(doc: dict) -> None:
    assert assert_agree("tool-call-result", ToolCallResult, doc) is False


def test_known_difference_kind_and_version_default_in_the_model_only() -> None:
    for missing in ("kind", "version"):
        doc = result(**{missing: ...})
        assert not validator("tool-call-result").is_valid(doc)
        assert ToolCallResult.model_validate(doc)  # closed by the codec (test_models)


def test_a_trailing_newline_is_refused_by_the_schema_too() -> None:
    # Python re lets `$` match before a final \n; the schema's `not` closes that.
    doc = result(id="call-1\n")
    assert not validator("tool-call-result").is_valid(doc)
    with pytest.raises(ValidationError):
        ToolCallResult.model_validate(doc)


# Generated documents: a valid result, then up to two random mutations anywhere in it
# (delete a key, replace a value, add a key), so about half the corpus is valid and the
# invalid half is near-valid, where disagreements hide.

safe_ints = st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
floats = st.floats(allow_nan=False, allow_infinity=False)
# Strings with a few non-ASCII characters and line feeds, at the end too.
short_text = st.text(alphabet="aZ09._:-/ +=$\u00e9\n", max_size=12).map(lambda s: s + "x")
end_text = st.sampled_from(["call-1\n", "a.png\n", "1.0\n", "YQ==\n", "image/png\n"])
json_values = st.recursive(
    st.none() | st.booleans() | safe_ints | floats | short_text,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(short_text, c, max_size=4),
    max_leaves=12,
)
text_outputs = st.fixed_dictionaries({"type": st.just("text"), "content": short_text})
json_outputs = st.fixed_dictionaries({"type": st.just("json"), "content": json_values})
media_outputs = st.fixed_dictionaries(
    {
        "type": st.just("media"),
        "mime_type": st.sampled_from(["image/png", "text/plain", "application/x.y+json"]),
        "base64_data": st.sampled_from(["", "QUJD", "YQ==", "iVBORw0KGgo="]),
    },
    optional={"filename": st.none() | st.sampled_from(["a.png", "_x y", "0"])},
)
outputs = st.recursive(
    text_outputs | json_outputs | media_outputs,
    lambda children: st.fixed_dictionaries(
        {"type": st.just("mixed"), "parts": st.lists(children, max_size=3)}
    ),
    max_leaves=6,
)
errors = st.fixed_dictionaries(
    {"code": st.sampled_from(ERROR_CODES), "message": short_text, "retryable": st.booleans()}
)
valid_results = st.fixed_dictionaries(
    {
        "kind": st.just("ToolCallResult"),
        "version": st.sampled_from(["1.0", "1.1", "12.3456"]),
        "id": st.sampled_from(["call-1", "a", "x:y.z", "Z" * 128]),
    }
).flatmap(
    lambda base: st.one_of(
        outputs.map(lambda o: {**base, "status": "ok", "output": o}),
        errors.map(lambda e: {**base, "status": "error", "error": e}),
    )
)
#: Replacement values: wrong types, near-miss strings and valid values of other fields.
junk = st.one_of(
    st.none(),
    st.booleans(),
    safe_ints,
    floats,
    short_text,
    end_text,
    st.sampled_from(
        [
            "",
            "-a",
            "abcde",
            "==",
            "4096.0",
            "ok",
            "error",
            "OK",
            "text",
            "json",
            "media",
            "mixed",
            "1.0",
            "1",
            "v1.0",
            "INTERNAL",
            "WORKER_OOM",
            "internal",
            "image/PNG",
            "a==b",
            "../x",
            "x" * 129,
        ]
    ),
    st.just([]),
    st.just({}),
    outputs,
    errors,
    st.lists(outputs, max_size=2),
)
new_keys = st.sampled_from(
    ["extra", "output", "error", "type", "content", "parts", "filename", "output_tail"]
)


def dict_nodes(node: Any) -> list[dict]:
    found, stack = [], [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


@st.composite
def result_docs(draw: st.DrawFn) -> dict:
    doc = json.loads(json.dumps(draw(valid_results)))  # a private, mutable copy
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        node = draw(st.sampled_from(dict_nodes(doc)))
        operation = draw(st.sampled_from(["delete", "replace", "add"]))
        if operation == "add" or not node:
            node[draw(new_keys)] = copy.deepcopy(draw(junk))  # st.just({}) is shared
        elif operation == "delete":
            del node[draw(st.sampled_from(sorted(node)))]
        else:
            node[draw(st.sampled_from(sorted(node)))] = copy.deepcopy(draw(junk))
    return doc


def test_schema_and_model_agree_on_generated_results() -> None:
    outcomes: Counter[bool] = Counter()

    @settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(result_docs())
    def agree(doc: dict) -> None:
        outcomes[assert_agree("tool-call-result", ToolCallResult, doc)] += 1

    agree()
    # The corpus must exercise both sides, or the agreement proves little.
    assert outcomes[True] >= 50 and outcomes[False] >= 50, outcomes


DESCRIBE = {
    "kind": "DescribeResult",
    "version": "1.0",
    "worker": {"name": "w", "version": "1.0.0"},
    "supported_versions": ["1.0"],
    "tools": [
        {"name": "t", "description": "", "input_schema": {"type": "object"}, "effects": "none"}
    ],
}
TOOL = DESCRIBE["tools"][0]


@pytest.mark.parametrize(
    ("changes", "valid"),
    [
        ({}, True),
        ({"tools": []}, True),
        ({"supported_versions": ["1.0", "1.1", "2.0"]}, True),
        ({"tools": [{**TOOL, "input_schema": {"type": "object", "x": [1, None]}}]}, True),
        ({"extra": 1}, False),
        ({"supported_versions": []}, False),
        ({"supported_versions": ["1.0"] * 17}, False),
        ({"supported_versions": ["v1"]}, False),
        ({"worker": {"name": "w"}}, False),
        ({"worker": {"name": "w", "version": ""}}, False),
        ({"worker": {"name": "w", "version": "-1"}}, False),
        ({"worker": {"name": "w", "version": "1", "x": 1}}, False),
        ({"tools": [{**TOOL, "effects": "some"}]}, False),
        ({"tools": [{**TOOL, "input_schema": []}]}, False),
        ({"tools": [{**TOOL, "input_schema": {"k" * 1025: 1}}]}, False),
        ({"tools": [{**TOOL, "description": "d" * 4097}]}, False),
        ({"tools": [{**TOOL, "name": "1t"}]}, False),
        ({"tools": [{**TOOL, "side_effects": True}]}, False),
        ({"tools": [TOOL] * 257}, False),
    ],
)
def test_describe_result_schema_and_model_agree(changes: dict, valid: bool) -> None:
    assert assert_agree("describe-result", DescribeResult, {**DESCRIBE, **changes}) is valid


REQUEST = {
    "kind": "ToolCallRequest",
    "version": "1.0",
    "id": "call-1",
    "tool": {"name": "t"},
    "arguments": {},
    "deadline_ms": 1,
    "limits": {"max_result_bytes": 10},
}


@pytest.mark.parametrize(
    ("changes", "valid"),
    [
        ({"added_in_1_1": True}, True),  # must-ignore
        ({"tool": {"name": "t", "revision": 2}}, True),
        ({"extensions": {"acme/trace": [1]}}, True),
        ({"extensions": {"trace": 1}}, False),  # un-namespaced: refused by both
        ({"extensions": {f"a/k{i}": i for i in range(65)}}, False),
        ({"limits": {"max_result_bytes": 0}}, False),
        ({"id": "a b"}, False),
    ],
)
def test_request_schema_and_model_agree(changes: dict, valid: bool) -> None:
    assert assert_agree("tool-call-request", ToolCallRequest, {**REQUEST, **changes}) is valid
