"""docs/operations.md: every command it shows exists as written (the command path, each
option, the number of arguments), and it tells how to see and unstick every condition
`session list --status` knows. The crash-matrix tests run these commands for real."""

from __future__ import annotations

import re
import shlex

import pytest
import typer
import typer.main

from runner.cli import app
from runner.session.operator import CONDITIONS
from tests.conftest import REPO

DOC = (REPO / "docs" / "operations.md").read_text()
COMMANDS = [line for block in re.findall(r"```sh\n(.*?)```", DOC, re.S)
            for line in block.splitlines() if line.strip()]  # fmt: skip


def test_the_doc_shows_the_commands_an_operator_needs():
    shown = " ".join(COMMANDS)
    for needed in ("session list --status", "session show", "session complete",
                   "session fail", "session retry TOKEN --force", "--unquarantine",
                   "--migrate", "--allow-agent-change", "agents-runner worker",
                   "agents-runner sweep"):  # fmt: skip
        assert needed in shown, needed


@pytest.mark.parametrize("condition", CONDITIONS)
def test_every_condition_has_a_section(condition: str):
    assert f"\n### {condition}\n" in DOC


@pytest.mark.parametrize("line", COMMANDS)
def test_each_command_exists_as_written(line: str):
    words = shlex.split(line)
    assert words[0] == "agents-runner", line
    command = typer.main.get_command(app)
    rest = words[1:]
    while hasattr(command, "get_command") and rest and not rest[0].startswith("-"):
        found = command.get_command(typer.Context(command), rest[0])
        assert found is not None, f"{line}: no command {rest[0]!r}"
        command, rest = found, rest[1:]
    params = {kind: [p for p in command.params if p.param_type_name == kind]
              for kind in ("option", "argument")}  # fmt: skip
    options = {name: p for p in params["option"] for name in p.opts}
    arguments, words_left = 0, iter(rest)
    for word in words_left:
        if word.startswith("--"):
            assert word in options, f"{line}: {command.name} has no option {word}"
            if not options[word].is_flag:
                assert next(words_left, None) is not None, f"{line}: {word} needs a value"
        else:
            arguments += 1
    expected = len(params["argument"])
    assert arguments == expected, f"{line}: {command.name} takes {expected} arguments"
