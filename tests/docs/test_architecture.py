"""docs/architecture.md shows the state tables the code enforces, and the layers the
import contracts check."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from runner.state.transitions import markdown

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "architecture.md").read_text()


def test_the_state_tables_in_the_doc_are_the_ones_the_code_enforces():
    assert markdown().strip() in DOC


def test_every_layer_of_the_contract_is_drawn():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    for layer in layers:
        for module in layer.split("|"):
            assert re.search(rf"(^ |\| ){re.escape(module.strip())}\b", DOC, re.M), module
