"""Every JSON example in the envelope spec and the threat model is valid against the
committed schema named by its `kind`, in the schema version its `version` picks (an event
object of section 11.5, which has no kind, against the 1.1 event schema), and the spec
names every check worker-check runs."""

from __future__ import annotations

import json
import re

import pytest

from envelopes import rules, schema
from envelopes.v1 import (
    RESERVED_ID,
    RUNNER_ERROR_CODES,
    DescribeResult,
    StreamEvent,
    ToolCallRequest,
    ToolCallResult,
    media_parts,
)
from tests.conftest import REPO

DOCS = [REPO / "docs" / "envelope-v1.md", REPO / "docs" / "threat-model.md"]
SCHEMA_OF_KIND = {
    "ToolCallRequest": "tool-call-request",
    "ToolCallResult": "tool-call-result",
    "DescribeRequest": "describe-request",
    "DescribeResult": "describe-result",
}
_BLOCK = re.compile(r"^```json\n(.*?)^```", re.DOTALL | re.MULTILINE)


def examples() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for index, match in enumerate(_BLOCK.finditer(doc.read_text(encoding="utf-8"))):
            found.append((f"{doc.name}#{index + 1}", match.group(1)))
    return found


def schema_of(document: dict) -> tuple[str, str]:
    """(schema name, schema version) for an example."""
    if "kind" not in document and document.get("type") in rules.EVENT_TYPES:
        return "event", "1.1"
    return SCHEMA_OF_KIND[document["kind"]], schema.schema_version_for(document.get("version"))


def test_the_spec_has_an_example_of_every_kind() -> None:
    kinds = {json.loads(text).get("kind") for _, text in examples()}
    assert kinds >= set(SCHEMA_OF_KIND)
    versions = {(json.loads(text).get("kind"), json.loads(text).get("version"))
                for _, text in examples()}  # fmt: skip
    assert {(kind, "1.1") for kind in SCHEMA_OF_KIND} - versions <= {("DescribeRequest", "1.1")}


@pytest.mark.parametrize(("where", "text"), examples(), ids=[w for w, _ in examples()])
def test_each_example_is_valid_against_its_schema(where: str, text: str) -> None:
    document = json.loads(text)
    is_event = "kind" not in document and document.get("type") in rules.EVENT_TYPES
    assert is_event or document.get("kind") in SCHEMA_OF_KIND, (
        f"{where}: every json block is an envelope or an event"
    )
    name, version = schema_of(document)
    names = [name]
    error = document.get("error") or {}
    if name == "tool-call-result" and error.get("code") not in RUNNER_ERROR_CODES:
        names.append(schema.WORKER_RESULT)  # what a worker sends: its schema too
    if document.get("id") == RESERVED_ID:
        names = [schema.WORKER_RESULT]  # only a worker answers with the reserved id
    for name in names:
        validator = schema.validator(name, version)
        errors = [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(document)
        ]
        assert errors == [], f"{where} ({name} {version}): {errors}"


_MODEL_OF = {
    "tool-call-request": ToolCallRequest,
    "tool-call-result": ToolCallResult,
    "describe-result": DescribeResult,
    "event": StreamEvent,
}


def members_1_1(document: dict) -> set[str]:
    """The 1.1 members an example shows (the models accept it, or this raises)."""
    name, _ = schema_of(document)
    model = _MODEL_OF[name].model_validate(document)  # the rules a schema cannot state, too
    if isinstance(model, StreamEvent):
        return {f"event:{model.root.type}"}
    shown = {key for key in ("files", "collect", "events", "capabilities") if key in document}
    if isinstance(model, ToolCallResult):
        shown |= {"path" for _, part in media_parts(model.output) if part.path is not None}
        shown |= {"output_tail" for error in [model.error] if error and error.output_tail}
    return shown


def test_the_1_1_examples_show_every_1_1_member_and_the_models_accept_them() -> None:
    shown: set[str] = set()
    for _, text in examples():
        document = json.loads(text)
        if schema_of(document)[1] == "1.1" and document.get("kind") != "DescribeRequest":
            shown |= members_1_1(document)
    events = {f"event:{kind}" for kind in rules.EVENT_TYPES}
    expected = {"files", "collect", "events", "capabilities", "path", "output_tail", *events}
    assert expected - shown == set()


def test_every_test_the_threat_model_cites_exists() -> None:
    text = (REPO / "docs" / "threat-model.md").read_text(encoding="utf-8")
    cited = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?", text)
    assert len(cited) > 20
    missing = []
    for path, name in cited:
        file = REPO / path
        if not file.is_file():
            missing.append(path)
        elif name and not re.search(rf"^(async )?def {name}\(", file.read_text(), re.MULTILINE):
            missing.append(f"{path}::{name}")
    assert missing == []


def test_the_spec_lists_every_check_id() -> None:
    text = (REPO / "docs" / "envelope-v1.md").read_text(encoding="utf-8")
    ids = [
        "describe.valid",
        "describe.versions",
        "stdout.pure",
        "exit_code",
        "output.controls",
        "tool.unknown",
        "arguments.invalid",
        "secrets.canary",
        "deadline.expired",
        "request.unknown_fields",
        "version.1.999",
        ".missing_field",
        ".deep_nesting",
        "version.leading_zero",
        ".kind_first",
        "version.refusal",
        "request.reserved_id",
        "critical.unknown",
        ".unknown_extension",
        ".absent",
        ".duplicate",
        "critical.understood",
        "files.trailing_globstar",
    ]
    assert [i for i in ids if f"`{i}`" not in text] == []


def _known_check(check_id: str) -> bool:
    """Whether worker-check runs a check of this id (`echo.<tool>`: one per tool)."""
    from runner.conformance import probes

    source = "".join(p.read_text() for p in (REPO / "runner" / "conformance").glob("*.py"))
    if check_id.endswith(".strict"):  # the strict twin of a malformed-request probe
        base = check_id.removesuffix(".strict")
        return base in {**probes.malformed(), **probes.version_grammar(), **probes.HOSTILE_FILES}
    if check_id.endswith(".<tool>"):
        return f'f"{check_id.removesuffix("<tool>")}{{tool.name}}"' in source
    return (
        f'"{check_id}"' in source
        or check_id in probes.malformed()
        or check_id in probes.HOSTILE_FILES
        or (check_id.startswith("version.") and check_id.removeprefix("version.") in source)
    )


def _test_exists(path: str, name: str) -> bool:
    file = REPO / path
    return file.is_file() and re.search(rf"^(async )?def {name}\(", file.read_text(),
                                        re.MULTILINE) is not None  # fmt: skip


def test_every_must_has_a_row_and_every_row_a_test() -> None:
    text = (REPO / "docs" / "envelope-v1.md").read_text(encoding="utf-8")
    body, _, table = text.partition("\n## 12. Every MUST and what verifies it")
    body = body[body.index("| document") :]  # after the key words' own definition
    body = body.replace("### 11.7 MUST for runners, SHOULD for workers", "")
    body = body.replace("its `required` checks are the\nMUSTs below", "")
    untagged, tags = [], set()
    for match in re.finditer(r"\bMUST\b", body):
        end = min(i for i in (body.find(". ", match.end()), body.find(".\n", match.end()),
                              body.find(" |", match.end()), body.find("\n\n", match.end()),
                              len(body)) if i >= 0)  # fmt: skip
        found = re.findall(r"\[R(\d+)\]", body[match.start() : end + 1])
        if not found:
            untagged.append(body[max(0, match.start() - 60) : match.end() + 60])
        tags.update(found)
    assert untagged == [], untagged
    rows = dict(re.findall(r"^\| R(\d+) \| (?:runner|worker|both) \| (.+) \|$", table, re.M))
    assert sorted(tags, key=int) == sorted(rows, key=int)
    missing = []
    for tag, cell in rows.items():
        cited = re.findall(r"`([^`]+)`", cell)
        assert cited, f"R{tag} names nothing"
        for item in cited:
            if item.startswith("tests/"):
                path, _, name = item.partition("::")
                ok = _test_exists(path, name)
            else:
                ok = _known_check(item)
            if not ok:
                missing.append(f"R{tag}: {item}")
    assert missing == []


_INVALID_BLOCK = re.compile(r"^```json-invalid\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_each_negative_example_is_refused_by_the_schema_and_the_runner() -> None:
    from envelopes import codec, wire

    text = (REPO / "docs" / "envelope-v1.md").read_text(encoding="utf-8")
    blocks = [json.loads(m.group(1)) for m in _INVALID_BLOCK.finditer(text)]
    assert len(blocks) >= 4
    for document in blocks:
        version = schema.schema_version_for(document["version"])
        assert not schema.validator(schema.WORKER_RESULT, version).is_valid(document), document
        request = ToolCallRequest.model_validate(
            {"kind": "ToolCallRequest", "version": "1.0", "id": "t1", "tool": {"name": "x"},
             "arguments": {}, "deadline_ms": 1, "limits": {"max_result_bytes": 4096}}
        )  # fmt: skip
        with pytest.raises(codec.MalformedOutput):
            codec.decode_result(wire.dumps(document), request)
