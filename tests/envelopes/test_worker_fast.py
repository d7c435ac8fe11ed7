"""The worker SDK's fast path (no pydantic, no jsonschema) against the models it stands in
for: the same verdicts, the same bytes, and nothing heavy imported on the way."""

from __future__ import annotations

import ast
import copy
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import jsonschema
import pytest

from envelopes import rules, v1, wire, worker_request
from envelopes.v1 import ToolCallRequest
from envelopes.worker import Worker
from envelopes.worker_schema import compile_schema

REPO = Path(__file__).resolve().parents[2]

GOOD: dict[str, Any] = {
    "kind": "ToolCallRequest",
    "version": "1.0",
    "id": "call-1",
    "tool": {"name": "t"},
    "arguments": {"script": "echo hi"},
    "deadline_ms": 1_700_000_000_000,
    "limits": {"max_result_bytes": 4096},
    "context": {"session_id": "s", "call_id": "c", "attempt": 2, "idempotency_key": "k"},
    "extensions": {"agents-runner.dev/policy": {"a": [1, 2]}, "x/y": None},
}


def variant(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    node = doc
    for key in path[:-1]:
        node = node[key]
    if value is DELETE:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return doc


DELETE = object()
VARIANTS = [
    (("id",), "a" * 128),
    (("id",), "a" * 129),
    (("id",), "-lead"),
    (("id",), "ok:._-9"),
    (("id",), "é"),
    (("id",), "x\n"),
    (("id",), 5),
    (("id",), DELETE),
    (("tool",), "t"),
    (("tool", "name"), "9t"),
    (("tool", "name"), "t" * 65),
    (("tool", "extra"), 1),
    (("arguments",), []),
    (("arguments",), {"k" * 1025: 1}),
    (("arguments",), {"a": list(range(rules.MAX_ITEMS + 1))}),
    (("deadline_ms",), True),
    (("deadline_ms",), 1.0),
    (("deadline_ms",), -1),
    (("deadline_ms",), 2**53),
    (("limits",), {}),
    (("limits", "max_result_bytes"), 0),
    (("limits", "max_result_bytes"), rules.MAX_RESULT_BYTES_CEILING + 1),
    (("limits", "max_result_bytes"), "7"),
    (("context",), None),
    (("context",), DELETE),
    (("context",), []),
    (("context", "attempt"), 0),
    (("context", "attempt"), True),
    (("context", "session_id"), 3),
    (("context", "session_id"), "s" * 129),
    (("context", "idempotency_key"), "k" * 257),
    (("context", "idempotency_key"), None),
    (("extensions",), None),
    (("extensions",), {}),
    (("extensions",), {"nokey": 1}),
    (("extensions",), {"Upper.case/k": 1}),
    (("extensions",), {"a..b/k": 1}),
    (("extensions",), {"a.b-c/K_9.-": 1}),
    (("extensions",), {"a/": 1}),
    (("extensions",), {"a/b/c": 1}),
    (("extensions",), {f"v/k{i}": i for i in range(rules.MAX_EXTENSIONS + 1)}),
    (("unknown_field",), {"ignored": True}),
]


@pytest.mark.parametrize(("path", "value"), VARIANTS)
def test_check_call_never_accepts_what_the_model_refuses(path, value) -> None:
    doc = variant(path, value)
    view = worker_request.check_call(doc)
    try:
        model = ToolCallRequest.model_validate(doc)
    except Exception:
        assert view is None
        return
    if view is None:  # stricter than the model is allowed (the model then decides)
        return
    assert (view.id, view.version, view.tool.name) == (model.id, model.version, model.tool.name)
    assert (view.arguments, view.deadline_ms) == (model.arguments, model.deadline_ms)
    assert view.limits.max_result_bytes == model.limits.max_result_bytes
    assert view.extensions == model.extensions
    if model.context is None:
        assert view.context is None
    else:
        for name in ("session_id", "call_id", "attempt", "idempotency_key"):
            assert getattr(view.context, name) == getattr(model.context, name)
    assert view.model_dump() == model.model_dump()  # delegated to the real model


def test_the_common_request_is_vouched_for() -> None:
    assert worker_request.check_call(copy.deepcopy(GOOD)) is not None


@pytest.mark.parametrize(
    ("pattern", "check", "samples"),
    [
        (rules.ID_PATTERN, rules.ID.match, ["a", "a" * 128, "a" * 129, ":x", "x:"]),
        (rules.TOOL_NAME_PATTERN, rules.TOOL_NAME.match, ["a", "a.b-c_d", "_a", "a b"]),
        (rules.VERSION_PATTERN, rules.is_version, ["1.0", "12345.1", "1.", "1.0.0", "01.1"]),
        (
            rules.EXTENSION_KEY_PATTERN,
            rules.is_extension_key,
            ["a/b", "a.b/c", "a-/b", "-a/b", "a.-/b", "a./b", "A/b", "a/b.c", "a/" + "b" * 65],
        ),
        (rules.WORKER_VERSION_PATTERN, rules.WORKER_VERSION.match, ["1", "1+x", "+1", "1" * 65]),
        (rules.CAPABILITY_PATTERN, rules.CAPABILITY.match, ["files", "a-b_c", "1a", "A", "a" * 33]),
        (rules.CRITICAL_MEMBER_PATTERN, rules.CRITICAL_MEMBER.match, ["files", "a_b", "a-b"]),
        (rules.FILENAME_PATTERN, rules.FILENAME.match, ["a b.txt", " a", "_x", "a" * 256]),
        (rules.MIME_PATTERN, None, ["image/png", "a/b+c", "a/", "A/b", "a/b c", "a" * 65 + "/b"]),
    ],
)
def test_pattern_checks_match_the_patterns(pattern: str, check, samples: list[str]) -> None:
    """Each rule of envelopes.rules, read as its published pattern and as its check."""
    import re

    longest = {t.pattern: t.longest for t in vars(rules).values() if isinstance(t, rules.Token)}
    for sample in [*samples, "", "ü", "a\n", "1.0\n"]:
        fits = re.fullmatch(pattern.strip("^$"), sample) is not None
        fits = fits and len(sample) <= longest.get(pattern, 193)
        if check is None:  # MIME: two tokens and a slash
            kind, slash, sub = sample.partition("/")
            verdict = bool(slash) and rules.MIME_TYPE.match(kind) and rules.MIME_SUBTYPE.match(sub)
        else:
            verdict = check(sample)
        assert verdict is fits, sample


def test_the_rules_module_spells_v1s_error_codes() -> None:
    assert rules.WORKER_ERROR_CODE_NAMES == v1.WORKER_ERROR_CODES
    assert get_args(v1.Effects) == rules.EFFECTS


# --- compiled schemas -----------------------------------------------------------------

SCHEMAS: list[Any] = [
    True,
    False,
    {},
    {"type": "string", "minLength": 2, "maxLength": 3},
    {"type": ["integer", "null"], "minimum": 0, "maximum": 10.5},
    {"type": "number", "minimum": -1},
    {"type": "boolean"},
    {"enum": ["a", "b"]},
    {"const": "a"},
    {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
    {
        "type": "object",
        "title": "t",
        "description": "d",
        "properties": {"a": {"type": "integer", "default": 3}, "b": False},
        "required": ["a"],
        "additionalProperties": {"type": "string"},
    },
    {"properties": {"a": {"type": "string"}}, "additionalProperties": False},
]
INSTANCES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    1.0,
    1.5,
    -2,
    11,
    "",
    "a",
    "abc",
    "abcd",
    "b",
    [],
    ["x"],
    ["x", 1],
    ["x", "y", "z"],
    {},
    {"a": 1},
    {"a": True},
    {"a": 1.0, "c": "s"},
    {"a": 1, "c": 2},
    {"a": 1, "b": 1},
    {"c": "x"},
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: json.dumps(s)[:40])
def test_compiled_checks_agree_with_jsonschema(schema: Any) -> None:
    check = compile_schema(schema)
    assert check is not None, "inside the subset"
    validator = jsonschema.Draft202012Validator(schema)
    for instance in INSTANCES:
        assert check(instance) is validator.is_valid(instance), instance


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "nonsense"},
        {"type": []},
        {"type": ["string", "string"]},
        {"maxLength": -1},
        {"maxLength": 2.0},
        {"required": "a"},
        {"required": ["a", "a"]},
        {"properties": []},
        {"title": 3},
        {"pattern": "^a$"},
        {"oneOf": [{}]},
        {"$ref": "#"},
        {"enum": [1, "a"]},
        {"items": [{}]},
        {"properties": {"a": {"type": "string", "pattern": "x"}}},
        [],
    ],
)
def test_anything_else_is_left_to_jsonschema(schema: Any) -> None:
    assert compile_schema(schema) is None


# --- whole answers: fast and slow give the same bytes ---------------------------------


def build(slow: bool, monkeypatch: pytest.MonkeyPatch | None = None) -> Worker:
    worker = Worker("w", "1.0")
    schema = {
        "type": "object",
        "properties": {"v": {"type": "string", "maxLength": 10}, "case": {"type": "string"}},
        "additionalProperties": False,
    }

    @worker.tool("t", description="returns things", input_schema=schema, effects="none")
    def t(arguments: dict, request: ToolCallRequest) -> Any:
        return RESULTS[arguments.get("case", "text")]()

    @worker.tool("p", description="", input_schema={"pattern": "^x"}, effects="none")
    def p(arguments: dict, request: ToolCallRequest) -> Any:
        return request.id

    if slow:
        for tool in worker._tools.values():
            tool.check = None
    return worker


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


RESULTS: dict[str, Any] = {
    "text": lambda: "hé\n\x00",
    "json": lambda: {"a": [1, 2.5, None, True, {"b": "c"}], "n": -(2**53 - 1)},
    "float": lambda: [1e300, -0.0, 0.1],
    "big_int": lambda: 2**53,
    "nan": lambda: math.nan,
    "tuple": lambda: (1, 2),
    "surrogate": lambda: "\ud800",
    "deep": lambda: nested(62),  # past the fast path's depth: the models write it
    "nested": lambda: nested(20),
    "long": lambda: "x" * 5000,
}


def requests() -> list[bytes]:
    base = {k: v for k, v in GOOD.items() if k != "extensions"}
    docs = [{**base, "tool": {"name": "t"}, "arguments": {"case": case}} for case in RESULTS] + [
        {**base, "tool": {"name": "t"}, "arguments": {"v": "x" * 11}},
        {**base, "tool": {"name": "t"}, "arguments": {"zz": 1}},
        {**base, "tool": {"name": "p"}, "arguments": {}},
        {**base, "tool": {"name": "nope"}},
        {**base, "version": "2.0"},
        {**base, "id": 7},
        {"kind": "DescribeRequest", "version": "1.0"},
        {"kind": "DescribeRequest", "version": "1.0", "extra": 1},
    ]
    return [wire.dumps(doc) for doc in docs] + [b"", b"[1]", b'{"kind": "Other"}']


@pytest.mark.parametrize("data", requests(), ids=lambda d: d[:60].decode())
def test_fast_and_slow_paths_answer_byte_for_byte_alike(
    data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = build(slow=False).answer(data)
    with monkeypatch.context() as patch:
        patch.setattr("envelopes.worker.check_call", lambda doc: None)
        patch.setattr("envelopes.worker._fast_output", _always_slow)
        slow = build(slow=True).answer(data)
    assert fast.payload == slow.payload
    assert fast.failed is slow.failed


def _always_slow(value: Any) -> Any:
    from envelopes.worker import _Slow

    raise _Slow


def test_a_small_limit_gives_the_same_limit_exceeded() -> None:
    doc = {**GOOD, "tool": {"name": "t"}, "arguments": {"case": "long"}}
    doc["limits"] = {"max_result_bytes": 1000}
    answer = build(slow=False).answer(wire.dumps(doc))
    assert answer.failed
    assert b"LIMIT_EXCEEDED" in answer.payload


# --- what a worker's start imports ----------------------------------------------------

HEAVY = ["pydantic", "jsonschema", "json", "re", "typing", "subprocess", "dataclasses", "enum"]


@pytest.mark.parametrize("image", ["bash-runner", "python-runner"])
def test_answering_a_call_imports_nothing_heavy(image: str) -> None:
    tool, arguments = (
        ("bash", {"script": "echo hi"})
        if image == "bash-runner"
        else (
            "python",
            {"code": "print('hi')"},
        )
    )
    doc = {**GOOD, "tool": {"name": tool}, "arguments": arguments, "deadline_ms": 2**52}
    program = (
        "import sys\n"
        f"sys.path[:0] = [{str(REPO)!r}, {str(REPO / 'images' / 'common')!r}]\n"
        f"sys.argv = [{str(REPO / 'images' / image / 'worker.py')!r}]\n"
        "loaded = set(sys.modules)\n"
        "module = {'__name__': 'worker_under_test'}\n"
        "exec(compile(open(sys.argv[0]).read(), sys.argv[0], 'exec'), module)\n"
        f"answer = module['worker'].answer({wire.dumps(doc)!r})\n"
        "heavy = sorted(m.split('.')[0] for m in set(sys.modules) - loaded)\n"
        "print(answer.failed, answer.payload[:60], heavy)\n"
    )
    # -S: no site (the test venv's .pth files import things a worker image does not have).
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    failed, _, rest = proc.stdout.partition(" ")
    assert failed == "False", proc.stdout
    imported = set(ast.literal_eval(rest[rest.index("[") :]))
    assert imported.isdisjoint(HEAVY), imported


@pytest.mark.parametrize("data", [b'{"a":', b'{"a" 1}', b'{"a":1,}', b"   ", b'{"a":"\\x"}'])
def test_wire_words_parse_errors_before_json_is_imported(data: bytes) -> None:
    # The C scanner finds json.decoder only once something imported it; a fresh worker
    # process has not.
    program = (
        f"import sys; sys.path[:0] = [{str(REPO)!r}]\n"
        "from envelopes import wire\n"
        "try:\n"
        f"    wire.loads({data!r}, max_bytes=100)\n"
        "except wire.WireError as exc:\n"
        "    print('WireError:', exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(wire.WireError) as expected:
        wire.loads(data, max_bytes=100)
    assert proc.stdout == f"WireError: {expected.value}\n"
