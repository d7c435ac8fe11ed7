"""Where the engine's isolated calls are audited: the setting and the sink it opens.

The setting says where (the commands read it from `AGENTS_RUNNER_AUDIT` and `--audit`;
runner/cli/settings.py): `store` (the default: the audit log of the store the sessions are in), a
JSON-lines file (`file:PATH`), or `off` (an explicit loosening, logged as a warning).
`fail_closed` (`AGENTS_RUNNER_AUDIT_FAIL=closed`) makes a record that cannot be written
fail its call (AuditFailed: the step stops before the outcome is used, as if the runner had died
there, and the effect ledger settles the call); `open`, the default, logs the record
at ERROR instead and carries on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runner.isolation.audit import AuditSink, JsonLinesAuditSink
from runner.stores import SessionStore, audit_sink_of

logger = logging.getLogger(__name__)

AUDIT_VARIABLE = "AGENTS_RUNNER_AUDIT"
AUDIT_FAIL_VARIABLE = "AGENTS_RUNNER_AUDIT_FAIL"
#: What the setting may say, for messages and help.
AUDIT_FORMS = "store, file:PATH or off"


class AuditSettingError(ValueError):
    """An audit setting that means nothing; the message says what was expected."""


@dataclass(frozen=True)
class AuditSetting:
    """Where records go: the store's log, a file (`path`), or nowhere; and whether a
    record that cannot be written fails its call."""

    to: Literal["store", "file", "off"] = "store"
    path: Path | None = None
    fail_closed: bool = False

    def describe(self) -> str:
        return f"file:{self.path}" if self.to == "file" else self.to


@dataclass(frozen=True)
class OpenedAudit:
    """A sink already opened (None: not audited), and whether a record that cannot be
    written fails its call: what an Engine gives every agent it runs."""

    sink: AuditSink | None
    fail_closed: bool = False


def parse_audit(text: str, fail_closed: bool = False, where: str = AUDIT_VARIABLE) -> AuditSetting:
    """`store`, `file:PATH` or `off`; AuditSettingError naming `where` otherwise."""
    value = text.strip()
    if value in ("store", "off"):
        return AuditSetting(value, None, fail_closed)  # type: ignore[arg-type]
    kind, colon, rest = value.partition(":")
    if kind == "file" and colon:
        if not rest.strip():
            raise AuditSettingError(f"{where}={text!r}: file: needs a path (file:PATH)")
        return AuditSetting("file", Path(rest.strip()), fail_closed)
    raise AuditSettingError(f"{where}={text!r}: expected {AUDIT_FORMS}")


def parse_fail_mode(text: str, where: str = AUDIT_FAIL_VARIABLE) -> bool:
    """True for `closed`, False for `open`; AuditSettingError otherwise."""
    value = text.strip().lower()
    if value not in ("open", "closed"):
        raise AuditSettingError(f"{where}={text!r}: expected open or closed")
    return value == "closed"


def open_audit(setting: AuditSetting, store: SessionStore | None) -> AuditSink | None:
    """The sink `setting` names for sessions in `store` (None: not audited, which is
    logged as a warning: nobody will be able to say afterwards what ran)."""
    if setting.to == "file":
        assert setting.path is not None
        return JsonLinesAuditSink(setting.path)
    if setting.to == "store" and store is not None:
        sink = audit_sink_of(store)
        if sink is not None:
            return sink
        logger.warning("%s keeps no audit log: isolated calls are NOT audited (set %s=file:PATH)",
                       store.description, AUDIT_VARIABLE)  # fmt: skip
        return None
    # Said where the sink is opened: once per Engine (a worker, the server), once per
    # DurableAgent otherwise.
    logger.warning("auditing is off (%s=off or --audit off): isolated calls leave no audit"
                   " record", AUDIT_VARIABLE)  # fmt: skip
    return None


__all__ = [
    "AUDIT_FAIL_VARIABLE",
    "AUDIT_FORMS",
    "AUDIT_VARIABLE",
    "AuditSetting",
    "AuditSettingError",
    "OpenedAudit",
    "open_audit",
    "parse_audit",
    "parse_fail_mode",
]
