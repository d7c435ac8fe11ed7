"""docs/configuration.md is what runner/cli/settings.py generates, and the settings
classes declare every variable an option of a command reads: the one list of the
environment the commands read is the one the documentation shows."""

from __future__ import annotations

import re

import typer.main

from runner.cli import app
from runner.cli.settings import (
    COMMANDS,
    DOC,
    NOT_CONFIGURATION,
    REGENERATE,
    CommandSettings,
    configuration_doc,
    env_name,
    settings_class,
)
from tests.conftest import REPO


def test_the_configuration_doc_is_generated_from_the_settings():
    assert DOC.read_text(encoding="utf-8") == configuration_doc(), (
        f"docs/configuration.md is out of date: run {REGENERATE}"
    )


def test_every_variable_an_option_reads_is_declared_by_its_command_s_settings():
    root = typer.main.get_command(app)
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        declared = {env_name(field) for field in settings_class(name).model_fields}
        subcommands = getattr(command, "commands", {}).values()
        for each in [command, *subcommands]:
            for param in each.params:
                if param.envvar:
                    assert param.envvar in declared, (name, each.name, param.envvar)


#: The library's only reads of the environment, none of them configuration: the variables
#: a local worker inherits (PATH, LANG... and its spec's `envAllow`), and the system's
#: temporary directory.
NOT_SETTINGS = {
    "runner/isolation/local.py": "os.environ[name] for name in names if name in os.environ",
    "envelopes/files.py": 'os.environ.get("TMPDIR")',
}


def test_the_library_reads_no_variable():
    for package in ("envelopes", "runner/session", "runner/isolation", "runner/stores",
                    "runner/server", "runner/tui", "runner/state"):  # fmt: skip
        for path in sorted((REPO / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            relative = path.relative_to(REPO).as_posix()
            allowed = NOT_SETTINGS.get(relative)
            if allowed is not None:
                text = text.replace(allowed, "")
            for read in ("os.environ", "getenv(", "environ.get("):
                assert read not in text, f"{relative} reads the environment ({read})"


def test_every_variable_the_project_names_is_in_the_doc():
    declared = {env_name(field) for cls in [CommandSettings, *COMMANDS.values()]
                for field in cls.model_fields}  # fmt: skip
    for folder in ("runner", "envelopes", "scripts", "tests", "examples", "images"):
        for path in sorted((REPO / folder).rglob("*")):
            if not path.is_file() or path.suffix in (".pyc", ".png", ".svg"):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for name in set(re.findall(r"AGENTS_RUNNER_[A-Z_]*[A-Z]", text)):
                assert name in declared or name in NOT_CONFIGURATION, (
                    f"{path.relative_to(REPO)} names {name}: declare it in"
                    " runner/cli/settings.py (or NOT_CONFIGURATION), then run " + REGENERATE
                )
