"""API keys by id, as agents-exe's agent files name them (`"apiKeyId": "openai"`).

agents-exe keeps its keys in a JSON file, `{"keys": [{"id": "openai", "value": "..."}]}`
(by default `~/.config/agents-exe/secret-keys`). `read_keys_file(path)` reads one into
an `ApiKeys`; the commands (runner/cli) choose which file and add the values of the
AGENTS_EXE_KEY_<ID> variables over it (`ApiKeys.with_variables`), so this module reads no
environment. A key's value is held here and in the provider made from it, never in a
stored document, a report or a log line: `ApiKeys` shows only its ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

#: Where agents-exe looks for its keys file, under the home directory.
AGENTS_EXE_KEYS_FILE = Path(".config") / "agents-exe" / "secret-keys"
#: The prefix of the variables that give a key by id (`openai`: AGENTS_EXE_KEY_OPENAI).
KEY_VARIABLE_PREFIX = "AGENTS_EXE_KEY_"


class KeysError(ValueError):
    """A keys file that cannot be used; the message says which and why (never a value)."""


def key_variable(key_id: str) -> str:
    """The variable that gives the key `key_id` (letters upper-cased, the rest `_`)."""
    return KEY_VARIABLE_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", key_id).upper()


@dataclass(frozen=True)
class ApiKeys:
    """Key values by id, and where they were read (for messages: never the values)."""

    values: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    sources: tuple[str, ...] = ()
    #: AGENTS_EXE_KEY_<ID> variables and their values (see `with_variables`).
    variables: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))
        object.__setattr__(self, "variables", MappingProxyType(dict(self.variables)))

    def __repr__(self) -> str:
        return (f"ApiKeys(ids={sorted(self.values)}, sources={list(self.sources)},"
                f" variables={sorted(self.variables)})")  # fmt: skip

    def get(self, key_id: str) -> str | None:
        """The value of `key_id`: its AGENTS_EXE_KEY_<ID> variable's, else the file's."""
        return self.variables.get(key_variable(key_id)) or self.values.get(key_id)

    def with_variables(self, environ: Mapping[str, str]) -> ApiKeys:
        """These keys and the AGENTS_EXE_KEY_<ID> variables of `environ` (which win)."""
        found = {k: v for k, v in environ.items() if k.startswith(KEY_VARIABLE_PREFIX) and v}
        return ApiKeys(self.values, self.sources, found)

    def missing(self, key_id: str) -> str:
        """Why the key `key_id` is not here, and how to give it."""
        looked = f"looked in {', '.join(self.sources)}" if self.sources else "no keys file"
        return (
            f"apiKeyId {key_id!r}: no key with that id ({looked}); add"
            f' {{"id": "{key_id}", "value": "..."}} to the keys file (`--api-keys FILE`,'
            f" default ~/{AGENTS_EXE_KEYS_FILE}) or set {key_variable(key_id)}"
        )


def read_keys_file(path: Path) -> ApiKeys:
    """The keys of agents-exe's keys file at `path`; KeysError naming the file and the
    entry for anything else (the values are never in a message)."""
    where = f"keys file {path}"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise KeysError(f"cannot read {where}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise KeysError(f"{where} is not valid JSON (line {getattr(exc, 'lineno', '?')})") from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise KeysError(f'{where}: expected {{"keys": [{{"id": ..., "value": ...}}]}}')
    values: dict[str, str] = {}
    for i, entry in enumerate(document["keys"]):
        if not isinstance(entry, dict) or set(entry) != {"id", "value"}:
            raise KeysError(f'{where}: keys[{i}]: expected {{"id": ..., "value": ...}}')
        key_id, value = entry["id"], entry["value"]
        if not isinstance(key_id, str) or not key_id or not isinstance(value, str):
            raise KeysError(f"{where}: keys[{i}]: `id` and `value` must be strings")
        if key_id in values:
            raise KeysError(f"{where}: keys[{i}]: the id {key_id!r} is given twice")
        values[key_id] = value
    return ApiKeys(values, (str(path),))


__all__ = [
    "AGENTS_EXE_KEYS_FILE",
    "KEY_VARIABLE_PREFIX",
    "ApiKeys",
    "KeysError",
    "key_variable",
    "read_keys_file",
]
