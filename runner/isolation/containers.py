"""Who owns a container: the labels every runner container carries, and the sweeper.

Each container is labelled with the call it serves and its owner (boot id, pid and
process start time of the runner). A runner that crashes cannot remove its containers;
the sweeper removes every labelled container whose owner is no longer alive on this
machine. Containers owned by a live process, or by another machine, are left alone.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import docker.errors

logger = logging.getLogger(__name__)

LABEL_MANAGED = "io.agents-runner.managed"
LABEL_OWNER = "io.agents-runner.owner"
LABEL_OWNER_HOST = "io.agents-runner.owner-host"
LABEL_CALL = "io.agents-runner.call"
LABEL_ROLE = "io.agents-runner.role"

#: Our seccomp profile (images/seccomp/generate.py): Docker's default leaves ptrace,
#: process_vm_* and io_uring open to a non-root process; this one refuses them.
#: Shipped inside the package, so wheel installs have it too. Call containers and the
#: egress proxy both run under it.
DEFAULT_SECCOMP_PROFILE = str(Path(__file__).with_name("seccomp-profile.json"))


def seccomp_option(path: str) -> str:
    """`--security-opt` for the profile at `path`, its JSON sent inline (the engine takes
    the content, not a path). Read at each create (half a millisecond; a create takes
    hundreds), so an edited or removed profile is never hidden by a memo. OSError or
    ValueError (naming the file) when it cannot be read; callers say what to do."""
    return "seccomp=" + json.dumps(json.loads(Path(path).read_text()), separators=(",", ":"))


@cache
def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError as exc:
        logger.warning("cannot read the boot id (%s): owner tokens name an unknown boot", exc)
        return "unknown-boot"


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:  # no such process (any more)
        return None
    # The command name (field 2) may contain spaces and parentheses: split after it.
    return stat.rsplit(")", 1)[1].split()[19]


def owner_token(pid: int) -> str | None:
    ticks = _start_ticks(pid)
    return None if ticks is None else f"{_boot_id()}/{pid}/{ticks}"


@cache
def my_owner_token() -> str:
    return owner_token(os.getpid()) or f"{_boot_id()}/{os.getpid()}/0"


def owner_alive(token: str) -> bool:
    """Whether the process named by an owner token still runs (on this boot)."""
    boot, _, rest = token.partition("/")
    pid_text, _, _ = rest.partition("/")
    if boot != _boot_id() or not pid_text.isdigit():
        return False
    return owner_token(int(pid_text)) == token


def labels_for(call: str, role: str = "call") -> dict[str, str]:
    return {
        LABEL_MANAGED: "1",
        LABEL_OWNER: my_owner_token(),
        LABEL_OWNER_HOST: socket.gethostname(),
        LABEL_CALL: call[:128],
        LABEL_ROLE: role,
    }


@dataclass(frozen=True)
class SweepReport:
    removed: list[str]
    kept: list[str]
    #: Egress networks removed (egress.sweep_networks), after their containers.
    networks: list[str] = field(default_factory=list)


def sweep(api: Any, *, everything: bool = False) -> SweepReport:
    """Remove labelled containers whose owner on this machine is gone.

    `api` is a docker.APIClient. With `everything`, remove every labelled container
    regardless of owner (for an operator cleaning up after a host was retired).
    """
    host = socket.gethostname()
    removed, kept = [], []
    for summary in api.containers(all=True, filters={"label": f"{LABEL_MANAGED}=1"}):
        labels = summary.get("Labels") or {}
        name = summary["Id"][:12]
        orphaned = labels.get(LABEL_OWNER_HOST) == host and not owner_alive(
            labels.get(LABEL_OWNER, "")
        )
        if everything or orphaned:
            try:
                api.remove_container(summary["Id"], force=True)
            except docker.errors.NotFound:
                logger.debug("sweep: container %s was already gone", name)
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: another sweep is removing it right now
                    raise
                logger.debug("sweep: container %s is being removed by another sweep", name)
            logger.info("sweep: removed container %s (owner %s, call %s)", name,
                        labels.get(LABEL_OWNER, "?"), labels.get(LABEL_CALL, "?"))  # fmt: skip
            removed.append(name)
        else:
            kept.append(name)
    return SweepReport(removed, kept)
