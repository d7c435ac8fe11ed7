"""Secrets a spec carries (the values of an isolation spec's `env`) are never stored or
shown: stored decisions, stored agent documents, reports, events and documents keep
the names, each value replaced by REDACTED (`{"env": {"API_KEY": "<redacted>"}}`).

The values live only in the agent definition a process was given (an agent file, or a
Python Agent). The Engine (or a lone DurableAgent) that is given such an agent remembers
it in its `Keyring`, under its hash (which is the hash of the redacted document, so a
rotated secret is no agent change), and a stored document it parses later is answered
with it; engines that should know the same definitions share one Keyring (`serve`'s
server and session worker). When a
call runs, its spec is rebuilt from the policy of that agent (`restore`); a process
that never saw the definition refuses to run the call, saying which names it lacks
(`unavailable`), and leaves it for a process that has it."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, TypeVar, cast

J = TypeVar("J")

#: What a secret's value is replaced with wherever it is stored or shown.
REDACTED = "<redacted>"
#: The spec tags whose `env` holds values for the worker (docker: should it grow one).
_SPEC_TAGS = ("localProcess", "docker")
#: Agents with secrets remembered per process.
KEPT = 256


def redact(value: J) -> J:
    """`value` (any JSON) with the values of every spec's `env` replaced by REDACTED."""
    return cast(J, _redact(value))


def _redact(value: Any) -> Any:
    if isinstance(value, list):
        return [_redact(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _redact(v) for k, v in value.items()}
    env = value.get("env")
    if value.get("tag") in _SPEC_TAGS and isinstance(env, dict):
        out["env"] = {str(name): REDACTED for name in env}
    return out


def redacted_names(value: Any) -> list[str]:
    """The env names in `value` (any JSON) whose value is REDACTED, sorted."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            env = node.get("env")
            if node.get("tag") in _SPEC_TAGS and isinstance(env, dict):
                found.update(str(k) for k, v in env.items() if v == REDACTED)
            for item in node.values():
                walk(item)

    walk(value)
    return sorted(found)


def has_secrets(value: Any) -> bool:
    """Whether `value` (any JSON) carries an env value that is not REDACTED."""
    return bool(_redact(value) != value)


class Keyring:
    """Agents with real secret values, by hash (the `size` most recently used kept): one
    per Engine unless it is given one to share."""

    def __init__(self, size: int = KEPT) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, Any] = OrderedDict()
        self._size = size

    def remember(self, agent_hash: str, agent: Any) -> None:
        with self._lock:
            self._kept[agent_hash] = agent
            self._kept.move_to_end(agent_hash)
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)

    def known(self, agent_hash: str) -> Any | None:
        with self._lock:
            return self._kept.get(agent_hash)


def unavailable(names: list[str], where: str) -> str:
    """Why `where` cannot run here: the names it lacks, and how to give them."""
    return (
        f"{where} needs the value(s) of env {', '.join(names)}, which are never stored;"
        " this process was not given the agent definition that has them: run it where the"
        " agent file is given (`--agent-file FILE`, `agents-runner worker --agents DIR`,"
        " or the server's `--agents DIR`)"
    )


__all__ = ["REDACTED", "Keyring", "has_secrets", "redact", "redacted_names",
           "unavailable"]  # fmt: skip
