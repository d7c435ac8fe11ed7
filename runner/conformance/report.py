"""What worker-check found: one Check per id, and the Report that holds them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail", "warn", "skip"]


@dataclass(frozen=True)
class Check:
    """One verdict. A `fail` of a required check fails the run; `warn` never does."""

    id: str
    status: Status
    detail: str = ""
    required: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "required": self.required,
                "detail": self.detail}  # fmt: skip


@dataclass
class Report:
    target: str
    checks: list[Check] = field(default_factory=list)

    def add(self, check_id: str, status: Status, detail: str = "", required: bool = True) -> None:
        self.checks.append(Check(check_id, status, detail, required))

    def by_id(self) -> dict[str, Check]:
        return {check.id: check for check in self.checks}

    def failed(self) -> list[Check]:
        """The required checks that failed: any of them makes the run fail."""
        return [c for c in self.checks if c.required and c.status == "fail"]

    @property
    def ok(self) -> bool:
        return not self.failed()

    def to_dict(self) -> dict[str, Any]:
        counts = {
            s: sum(c.status == s for c in self.checks) for s in ("pass", "fail", "warn", "skip")
        }
        return {
            "target": self.target,
            "ok": self.ok,
            "counts": counts,
            "failed": [c.id for c in self.failed()],
            "checks": [c.to_dict() for c in self.checks],
        }
