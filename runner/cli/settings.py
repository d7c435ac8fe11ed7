"""The environment the commands read, declared once: one settings object per command.

The library (runner.session, runner.isolation, runner.stores, runner.server, envelopes)
reads no variable: it takes explicit values. Only the front doors read the environment,
each through the settings class `COMMANDS` names for it, read once by the app's callback
(`read_settings`) and found again by the helpers with `current`.

A variable that also has an option (`--store`, `--pool-size`...) is read by that option
(`envvar=env_name(...)`), so the command line beats the environment, which beats the
default, and a bad value is refused naming both; the settings field only declares it.

docs/configuration.md is generated from these classes (`python -m runner.cli.settings
--write`, or scripts/gen-config-docs); tests/runner/test_configuration_doc.py keeps it
equal.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import click
from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from runner.cli.app import fail
from runner.session.audit import (
    AuditSetting,
    AuditSettingError,
    parse_audit,
    parse_fail_mode,
)
from runner.session.settings import DEFAULT_LEASE_SECONDS, AgentSettings

PREFIX = "AGENTS_RUNNER_"
DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
REGENERATE = "scripts/gen-config-docs"

#: The default of `--store` (under the current directory: a project keeps its own).
DEFAULT_STORE = ".agents-runner/state.db"
#: How long `worker` and `serve` wait at start for a store that does not answer yet.
STORE_WAIT_S = 60.0
LOG_LEVELS = "DEBUG, INFO, WARNING or ERROR"

S = TypeVar("S", bound="CommandSettings")


def env_name(field: str) -> str:
    """The variable of a settings field (`pool_size`: AGENTS_RUNNER_POOL_SIZE)."""
    return PREFIX + field.upper()


def _option(default: str, description: str) -> Any:
    """A field whose variable an option reads (the option's `envvar=`): declared here for
    the documentation only, its value kept as the text it is."""
    return Field(None, description=description,
                 json_schema_extra={"shown": default, "option_only": True})  # fmt: skip


def _fail_mode(value: object) -> str:
    try:
        return "closed" if parse_fail_mode(str(value)) else "open"
    except AuditSettingError as exc:
        raise ValueError(str(exc)) from None


class CommandSettings(BaseSettings):
    """What every command reads."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, env_ignore_empty=True, extra="ignore",
                                      frozen=True)  # fmt: skip

    log_level: str = Field("WARNING", description="the level of the library's log lines on"
                           " stderr (WARNING: retries and recoveries)")  # fmt: skip
    api_keys: str | None = Field(None, description="agents-exe's keys file (`{\"keys\": [{\"id\","
                                 " \"value\"}]}`), where an agent file's `apiKeyId` is looked"
                                 " up (`--api-keys FILE` wins; AGENTS_EXE_KEY_<ID> variables win"
                                 " over both)",
                                 json_schema_extra={"shown": "~/.config/agents-exe/secret-keys,"
                                                    " if it exists"})  # fmt: skip

    @field_validator("log_level", mode="before")
    @classmethod
    def _level(cls, value: object) -> str:
        name = str(value).upper()
        if name not in logging.getLevelNamesMapping():
            raise ValueError(f"{env_name('log_level')}={name!r}: expected {LOG_LEVELS}")
        return name


class StoreSettings(CommandSettings):
    """A command that opens a store."""

    store: str | None = _option(
        DEFAULT_STORE, "the store: PATH or sqlite:PATH, file:DIR, postgresql://..., or LOC,LOC"
    )


class EngineSettings(StoreSettings):
    """A command that advances sessions: how it audits isolated calls, how long its leases
    last, and the network egress proxies go out through."""

    audit: str | None = Field(None, description="where each isolated call's audit record"
                              " goes: store, file:PATH or off",
                              json_schema_extra={"shown": "store"})  # fmt: skip
    audit_fail: str = Field("open", description="`closed`: a record that cannot be written"
                            " fails its call; `open`: it is logged at ERROR instead")  # fmt: skip
    lease_seconds: float = Field(DEFAULT_LEASE_SECONDS, description="how long a session's"
                                 " lease lasts unless renewed")  # fmt: skip
    egress_network: str | None = Field(None, description="the Docker network an egress proxy"
                                       " reaches the allowed hosts through, when the policy"
                                       " names none (unset: such a call fails to start)",
                                       json_schema_extra={"shown": "none"})  # fmt: skip
    pool_size: str | None = _option("each docker spec's `pool`", "warm containers per image and"
                                    " limits for Docker-isolated calls (0: none)")  # fmt: skip

    @field_validator("audit_fail", mode="before")
    @classmethod
    def _fail_mode(cls, value: object) -> str:
        return _fail_mode(value)

    @field_validator("lease_seconds", mode="before")
    @classmethod
    def _lease(cls, value: object) -> float:
        try:
            seconds = float(str(value))
        except ValueError:
            seconds = -1.0
        if not seconds > 0:  # also NaN
            raise ValueError(f"{env_name('lease_seconds')}={value!r}: expected a number of"
                             " seconds > 0")  # fmt: skip
        return seconds

    @property
    def fail_closed(self) -> bool:
        return self.audit_fail == "closed"

    def audit_setting(self) -> AuditSetting:
        """The audit of a command not given `--audit`: the variable's, else the store."""
        try:
            return parse_audit(self.audit or "store", self.fail_closed)
        except AuditSettingError as exc:
            fail(str(exc), 2)

    def agent_settings(self, audit: AuditSetting | None = None) -> AgentSettings:
        """What every agent this command runs is given (`audit`: `--audit`'s, if given)."""
        return AgentSettings(lease_s=self.lease_seconds, audit=audit or self.audit_setting(),
                             egress_network=self.egress_network)  # fmt: skip


class SessionSettings(EngineSettings):
    """`session ...` (`run-isolated` forces a runtime)."""

    runtime: str | None = _option("each docker spec's `runtime` (runc)", "the engine runtime"
                                  " of every Docker-isolated call: runc or runsc")  # fmt: skip


class WorkerSettings(SessionSettings):
    """`worker`: a long-running command, and its warm pool's idle shrink."""

    pool_idle_seconds: str | None = _option("180", "a warm pool's shelf unused for this long"
                                            " gives back its idle containers")  # fmt: skip
    store_wait_seconds: float = Field(STORE_WAIT_S, description="how long a long-running"
                                      " command waits at start for a store that does not"
                                      " answer yet")  # fmt: skip

    @field_validator("store_wait_seconds", mode="before")
    @classmethod
    def _wait(cls, value: object) -> float:
        try:
            seconds = float(str(value))
        except ValueError:
            seconds = -1.0
        if not seconds >= 0:  # also NaN
            raise ValueError(f"{env_name('store_wait_seconds')}: expected a number of seconds"
                             f" >= 0, got {value!r}")  # fmt: skip
        return seconds


class ServeSettings(WorkerSettings):
    """`serve`: the worker's settings, and its port."""

    port: str | None = _option("8080", "the port the server listens on")


class TuiSettings(EngineSettings):
    """`tui`: on a store, or on a server with a token."""

    token: str | None = _option("none", "the server's bearer token (`tui --server`)")


class IsolateSettings(CommandSettings):
    """`isolate`: one call, no store."""

    egress_network: str | None = _option("none", "the Docker network an egress proxy reaches"
                                         " the allowed hosts through")  # fmt: skip
    audit: str | None = _option("off", "append the call's audit record to file:PATH")
    audit_fail: str = Field("open", description="`closed`: a record that cannot be written"
                            " fails the call")  # fmt: skip

    @field_validator("audit_fail", mode="before")
    @classmethod
    def _fail_mode(cls, value: object) -> str:
        return _fail_mode(value)

    @property
    def fail_closed(self) -> bool:
        return self.audit_fail == "closed"


#: The settings class of each top-level command (a group's covers its subcommands);
#: any other command reads CommandSettings.
COMMANDS: Mapping[str, type[CommandSettings]] = MappingProxyType(
    {
        "audit": StoreSettings,
        "demo": EngineSettings,
        "isolate": IsolateSettings,
        "run": EngineSettings,
        "serve": ServeSettings,
        "session": SessionSettings,
        "tui": TuiSettings,
        "worker": WorkerSettings,
    }
)


def settings_class(command: str | None) -> type[CommandSettings]:
    return COMMANDS.get(command or "", CommandSettings)


def read_settings(cls: type[S]) -> S:
    """`cls` from the environment, or one line on stderr naming the variable (exit 2)."""
    try:
        return cls()
    except ValidationError as exc:
        error = exc.errors()[0]
        cause = (error.get("ctx") or {}).get("error")
        fail(str(cause) if cause else f"{env_name(str(error['loc'][0]))}: {error['msg']}", 2)


def current(cls: type[S]) -> S:
    """The settings the app's callback read for the command being run, or (outside a
    command, or for a narrower class) `cls` read now."""
    context = click.get_current_context(silent=True)
    found = None
    if context is not None and isinstance(context.find_root().obj, dict):
        found = context.find_root().obj.get("settings")
    return found if isinstance(found, cls) else read_settings(cls)


# --- docs/configuration.md ----------------------------------------------------------------

#: Variables that configure no command: test hooks, what the runner sets for its workers,
#: the example claimer's, and the scripts' and tests' own.
NOT_CONFIGURATION: Mapping[str, str] = MappingProxyType(
    {
        "AGENTS_RUNNER_CRASH_AT": "test hook (runner/faults.py): the process dies at a named point",
        "AGENTS_RUNNER_BARRIER_AT": "test hook (runner/faults.py): the process waits at a point",
        "AGENTS_RUNNER_OWNER": "set BY the runner on each local worker it starts (orphan sweep)",
        "AGENTS_RUNNER_URL": "examples/workers/claim-worker.sh: the server it claims calls from"
        " (with AGENTS_RUNNER_TOKEN)",
        "AGENTS_RUNNER_BASE": "scripts/build-images: the base image",
        "AGENTS_RUNNER_OFFLINE_BASE": "scripts/build-images: build without pulling",
        "AGENTS_RUNNER_DEBIAN_MIRROR": "scripts/build-images: the Debian mirror",
        "AGENTS_RUNNER_PULL_TIMEOUT": "scripts/build-images: how long a pull may take",
        "AGENTS_RUNNER_DOCKERD_WAIT": "scripts/lib/engine.sh: how long to wait for dockerd",
        "AGENTS_RUNNER_DOCKERD_LOG": "scripts/lib/engine.sh: dockerd's log file",
        "AGENTS_RUNNER_DOCKER_CONFIG": "scripts/lib/engine.sh: the daemon.json gVisor is put in",
        "AGENTS_RUNNER_ROOT": "scripts/lib/engine.sh: the checkout the scripts work in",
        "AGENTS_RUNNER_BENCH_POSTGRES_URL": "scripts/bench: the PostgreSQL server of its rows",
        "AGENTS_RUNNER_TEST_POSTGRES_URL": "tests: the PostgreSQL server the store tests use",
        "AGENTS_RUNNER_TEST_POSTGRES_DIR": "tests: the throwaway PostgreSQL cluster's directory",
        "AGENTS_RUNNER_TEST_PROXY_IMAGE": "tests: the egress proxy image the smuggling tests use",
        "AGENTS_RUNNER_SKIP_DOCKER": "tests: skip the tests that need Docker",
        "AGENTS_RUNNER_RUNSC": "tests: whether gVisor tests run",
        "AGENTS_RUNNER_CANARY": "tests: a secret that must never reach a worker",
    }
)


def _extra(cls: type[CommandSettings], field: str) -> dict[str, Any]:
    extra = cls.model_fields[field].json_schema_extra
    return dict(extra) if isinstance(extra, dict) else {}


def _shown(field: str, cls: type[CommandSettings]) -> str:
    return str(_extra(cls, field).get("shown", cls.model_fields[field].default))


def configuration_doc() -> str:
    """docs/configuration.md, from COMMANDS and the options of the app's commands."""
    import typer.main

    from runner.cli import app

    root = typer.main.get_command(app)
    commands: dict[str, click.Command] = getattr(root, "commands", {})
    rows: dict[str, dict[str, Any]] = {}
    for name in sorted(commands):
        cls = settings_class(name)
        options = {str(p.envvar): p for p in _option_params(commands[name])}
        for field in cls.model_fields:
            row = rows.setdefault(field, {"cls": cls, "commands": []})
            option = options.get(env_name(field))
            if option is not None:
                row["commands"].append(f"`{name} {option.opts[0]}`")
            elif not _extra(cls, field).get("option_only"):  # else: another command's option
                row["commands"].append(f"`{name}`")
    lines = [
        "# Configuration",
        "",
        f"<!-- Generated from runner/cli/settings.py by `{REGENERATE}`: do not edit. -->",
        "",
        "Only the commands read the environment (runner/cli/settings.py: one settings class",
        "per command, read once as it starts); the library takes every setting as an explicit",
        "argument (`runner.session.AgentSettings`, `create_app(..., agents=...)`). Where the",
        "table names an option (`run --audit`), that option reads the variable: the option,",
        "when given, wins over the variable, and the variable over the default.",
        "",
        "| Variable | Sets | Default | Read by |",
        "| --- | --- | --- | --- |",
    ]
    for field, row in sorted(rows.items(), key=lambda item: env_name(item[0])):
        cls = row["cls"]
        description = cls.model_fields[field].description or ""
        lines.append(f"| `{env_name(field)}` | {description} | {_shown(field, cls)} |"
                     f" {', '.join(row['commands'])} |")  # fmt: skip
    lines += ["", "## Not configuration", "",
              "The tests, the scripts and the runner itself use these; no command reads them"
              " as settings:", ""]  # fmt: skip
    lines += [f"- `{name}`: {why}" for name, why in NOT_CONFIGURATION.items()]
    return "\n".join(lines) + "\n"


def _option_params(command: click.Command) -> list[click.Parameter]:
    found = [p for p in command.params if getattr(p, "envvar", None)]
    for sub in getattr(command, "commands", {}).values():
        found += _option_params(sub)
    return found


def main(argv: list[str]) -> int:
    text = configuration_doc()
    if argv == ["--write"]:
        DOC.write_text(text, encoding="utf-8")
    elif argv:
        print(f"usage: {REGENERATE} [--write]  (without --write: print it)", file=sys.stderr)
        return 2
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


__all__ = [
    "COMMANDS",
    "DEFAULT_STORE",
    "CommandSettings",
    "EngineSettings",
    "IsolateSettings",
    "ServeSettings",
    "SessionSettings",
    "StoreSettings",
    "TuiSettings",
    "WorkerSettings",
    "configuration_doc",
    "current",
    "env_name",
    "read_settings",
    "settings_class",
]
