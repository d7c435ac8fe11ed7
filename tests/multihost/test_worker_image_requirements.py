"""The worker image installs the package with --no-deps from a pinned list: every run-time
dependency pyproject.toml names must be on that list, or the image builds a command that
fails to import (as it did when the server's dependencies were added)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_run_time_dependency_is_pinned_in_the_worker_image() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    needed = {_name(r) for r in project["dependencies"]}
    lines = (REPO / "images/worker/requirements.txt").read_text().splitlines()
    pinned = {_name(line) for line in lines if line.strip() and not line.startswith("#")}
    assert needed - pinned == set(), "add these to images/worker/requirements.txt"
