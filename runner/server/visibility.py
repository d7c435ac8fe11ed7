"""What a caller may see: one View per request, derived from its grant, that every
answer about a session and every Server-Sent Event goes through.

- operator (and `--no-auth`): everything, secrets aside.
- viewer: everything an operator reads, secrets aside.
- claimer: the calls of the tools it is granted, nothing else: no other call's
  arguments, token or result, no final answer, no conversation, no session event.

Secrets (the values of a spec's `env`) are never shown to anyone: they are not stored
(runner.session.secrets), and every answer is redacted again here, so a session stored
before that still shows none."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeVar

from runner.server.auth import Grant
from runner.session import StepReport
from runner.session.secrets import redact
from runner.stores import Event

J = TypeVar("J")
#: What a claimer keeps of a step report (beside its own calls).
_CLAIMER_REPORT_FIELDS = ("status", "session_id", "action")


@dataclass(frozen=True)
class View:
    grant: Grant | None  # None: no access control (`serve --no-auth`), an operator

    @property
    def claimer(self) -> bool:
        return self.grant is not None and self.grant.role == "claimer"

    def sees_call(self, tool: object) -> bool:
        """Whether the caller may see a call of `tool` (its arguments, token, result)."""
        return not self.claimer or (self.grant is not None and self.grant.may_use(str(tool)))

    def sees_event(self, event: Event) -> bool:
        """Operators and viewers: every event; a claimer: its tools' call events."""
        if not self.claimer:
            return True
        return event.kind.startswith("call.") and self.sees_call(event.data.get("tool"))

    def body(self, value: J) -> J:
        """Any answer's JSON, secrets redacted (the last step of every answer below)."""
        return redact(value)

    def report(self, report: StepReport) -> dict[str, Any]:
        """A step or resume report (POST resume, pause, and a continuation's `resumed`)."""
        full: dict[str, Any] = report.to_dict()
        if not self.claimer:
            return self.body(full)
        calls = report.session.calls
        out = {k: full[k] for k in _CLAIMER_REPORT_FIELDS}
        out["ran"] = [i for i in full["ran"] if i in calls and self.sees_call(calls[i].tool)]
        if "deferred_calls" in full:
            out["deferred_calls"] = self.calls(full["deferred_calls"])
        return self.body(out)

    def calls(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Pending-call entries (`pending_entry`, claims): those of the caller's tools."""
        return [self.body(e) for e in entries if self.sees_call(e.get("tool"))]

    def document(self, document: dict[str, Any]) -> dict[str, Any]:
        """A session document (GET /v1/sessions/{id}). Claimers are refused it before it
        is read; should one reach here it holds only the claimer's calls."""
        if self.claimer:
            calls = document.get("calls", {})
            return self.body({"id": document.get("id"), "status": document.get("status"),
                              "calls": {k: c for k, c in calls.items()
                                        if self.sees_call(c.get("tool"))}})  # fmt: skip
        return self.body(document)

    def event(self, event: Event) -> dict[str, Any] | None:
        """An event's JSON as streamed (without `seq` for a live event), or None when
        the caller may not see it."""
        if not self.sees_event(event):
            return None
        head: dict[str, Any] = {"kind": event.kind, "at_ms": event.at_ms}
        if event.seq != 0:  # a live event is not in the log (events.LIVE_SEQ)
            head = {"seq": event.seq, **head}
        return self.body({**head, **event.data})

    def event_text(self, event: Event) -> str | None:
        found = self.event(event)
        return None if found is None else json.dumps(found, separators=(",", ":"))


def view_of(grant: Grant | None) -> View:
    return View(grant)


__all__ = ["View", "view_of"]
