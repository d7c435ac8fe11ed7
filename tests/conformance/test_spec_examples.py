"""Every JSON example in the envelope spec and the threat model is valid against the
committed schema named by its `kind`, and the spec names every check worker-check runs."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from envelopes import schema
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


def test_the_spec_has_an_example_of_every_kind() -> None:
    kinds = {json.loads(text).get("kind") for _, text in examples()}
    assert kinds >= set(SCHEMA_OF_KIND)


@pytest.mark.parametrize(("where", "text"), examples(), ids=[w for w, _ in examples()])
def test_each_example_is_valid_against_its_schema(where: str, text: str) -> None:
    document = json.loads(text)
    assert document.get("kind") in SCHEMA_OF_KIND, f"{where}: every json block is an envelope"
    validator = jsonschema.Draft202012Validator(schema.load(SCHEMA_OF_KIND[document["kind"]]))
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(document)
    ]
    assert errors == [], f"{where}: {errors}"


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
    ]
    assert [i for i in ids if f"`{i}`" not in text] == []
