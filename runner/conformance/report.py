"""What worker-check found: one Check per id, and the Report that holds them.

Every check has a level. `required` is what interoperability and safety need: a runner
talking to the worker gets right answers, and no malformed request is ever taken for a
call. `strict` is the exact error code for each malformed request (INVALID_REQUEST), which
takes a strict JSON parser. `advisory` checks (warnings) never fail a run. A run fails on
a failed `required` check, and also on a failed `strict` one when run with `--strict`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail", "warn", "skip"]
Level = Literal["required", "strict", "advisory"]
LEVELS: tuple[Level, ...] = ("required", "strict", "advisory")


@dataclass(frozen=True)
class Check:
    """One verdict at one level; `skip` and `warn` never fail a run."""

    id: str
    status: Status
    detail: str = ""
    level: Level = "required"

    @property
    def required(self) -> bool:
        return self.level == "required"

    def counts(self, strict: bool) -> bool:
        """Whether a `fail` of this check fails a run in this mode."""
        return self.level == "required" or (strict and self.level == "strict")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "level": self.level,
                "required": self.required, "detail": self.detail}  # fmt: skip


@dataclass
class Report:
    target: str
    checks: list[Check] = field(default_factory=list)

    def add(
        self, check_id: str, status: Status, detail: str = "", level: Level = "required"
    ) -> None:
        self.checks.append(Check(check_id, status, detail, level))

    def by_id(self) -> dict[str, Check]:
        return {check.id: check for check in self.checks}

    def failed(self, strict: bool = False) -> list[Check]:
        """The failed checks that fail the run: `required` ones, plus `strict` ones
        when `strict`."""
        return [c for c in self.checks if c.status == "fail" and c.counts(strict)]

    def failed_at(self, level: Level) -> list[Check]:
        return [c for c in self.checks if c.status == "fail" and c.level == level]

    @property
    def ok(self) -> bool:
        """Every required check passed (what the exit status follows without --strict)."""
        return not self.failed()

    @property
    def strict_ok(self) -> bool:
        """Every required and every strict check passed."""
        return not self.failed(strict=True)

    def to_dict(self, strict: bool = False) -> dict[str, Any]:
        counts = {
            s: sum(c.status == s for c in self.checks) for s in ("pass", "fail", "warn", "skip")
        }
        return {
            "target": self.target,
            "strict": strict,
            "ok": not self.failed(strict),
            "required_ok": self.ok,
            "strict_ok": self.strict_ok,
            "counts": counts,
            "failed": [c.id for c in self.failed(strict)],
            "failed_by_level": {
                level: [c.id for c in self.failed_at(level)] for level in ("required", "strict")
            },
            "checks": [c.to_dict() for c in self.checks],
        }
