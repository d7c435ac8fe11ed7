#!/usr/bin/env python3
"""One word per concept (issue 25, item 7; docs/glossary.md): the mechanical renames.

    python3 scripts/dev/rename-words.py           # rewrite the tree in place
    python3 scripts/dev/rename-words.py --check   # only say what would change (exit 1 if any)

Idempotent: every rule's replacement no longer matches its pattern, so running it again on
a renamed tree (or on a tree with other changes merged in) changes only what is still
named the old way. It touches runner/ envelopes/ tests/ docs/ examples/ scripts/ and
README.md (.py .md .sh), never docs/glossary.md (its table names the old names on purpose),
generated files (docs/openapi.json: regenerate it with scripts/gen-schemas), nor itself.

What is renamed:
- "wake" meaning "give open calls their results" -> complete: `WakeReport` ->
  `CompletionReport`; `commands.wake`, `DurableAgent.wake`, `Engine.wake` (by session id
  and results) -> `complete_calls` (`Engine.complete` is the one by token);
  `routes.wake` and the CLI's `wake_by_token` -> `complete_by_token`; the console
  store's `_wake` -> `_complete`.
- a store's announcement ("wakes `wait_for_due`") -> notify; an in-process `anyio.Event`
  wake-up (the session worker's loop, the event hub's Subscriber, the console's server
  source) -> signal.
- the claimer: token role "worker" -> "claimer" (runner/server), `View.worker` ->
  `View.claimer`, `Claim.worker` and `claim_calls(tools, worker, ...)` -> `claimer`. The
  `claims` table's column keeps its name (`worker`): only the Python names change.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("runner", "envelopes", "tests", "docs", "examples", "scripts")
FILES = ("README.md",)
SUFFIXES = {".py", ".md", ".sh"}
SKIP = {"docs/glossary.md", "scripts/dev/rename-words.py"}


@dataclass(frozen=True)
class Rule:
    pattern: str
    replacement: str
    #: Path prefixes (relative to the root) the rule applies to; empty: every file.
    only: tuple[str, ...] = ()

    def applies(self, relative: str) -> bool:
        return not self.only or relative.startswith(self.only)


SERVER_ROLE_FILES = tuple(
    f"runner/server/{name}.py" for name in ("auth", "visibility", "routes", "claims", "events")
)
STORES = ("runner/stores/",)

#: In order: the narrow, file-scoped rules come before the wide ones they would confuse.
RULES: tuple[Rule, ...] = (
    # --- complete ---------------------------------------------------------------------
    Rule(r"\bWakeReport\b", "CompletionReport"),
    Rule(r"\bWAKE_ATTEMPTS\b", "COMPLETE_ATTEMPTS"),
    Rule(r"\bwake_by_token\b", "complete_by_token"),
    Rule(
        r"`call`, `wake` and `engine_errors` are what the other route modules\nbuild on;",
        "`call`, `complete_by_token` and `engine_errors` are what the other\n"
        "route modules build on;",
        ("runner/server/routes.py",),
    ),
    Rule(r"\bwake\b", "complete_by_token", ("runner/server/routes.py", "runner/server/claims.py")),
    Rule(r"\b_wake\b", "_complete", ("runner/tui/store.py",)),
    Rule(r"own writes wake the wait", "own writes notify the wait", ("runner/tui/store.py",)),
    # --- signal (before the wide `.wake` rule below) -------------------------------------
    Rule(r"\bself\._wake\b", "self._signal", ("runner/server/events.py",)),
    Rule(r"\bdef wake\(self\)", "def signal(self)", ("runner/server/events.py",)),
    Rule(r"\b(self|subscriber)\.wake\(\)", r"\1.signal()", ("runner/server/events.py",)),
    Rule(
        r"announces writes wakes it at once",
        "announces writes signals it at once",
        ("runner/server/events.py",),
    ),
    Rule(r"#: wakes it sooner", "#: signals it sooner", ("runner/server/events.py",)),
    Rule(r"\b_wake\b", "_signal", ("runner/tui/server.py",)),
    Rule(r"\b(_?)woken\b", r"\1signalled", ("runner/tui/server.py",)),
    Rule(
        r"any logged event wakes `changes`",
        "any logged event signals `changes`",
        ("runner/tui/server.py",),
    ),
    Rule(
        r"\bwake( = anyio\.Event\(\)|\.set\(\)|\.wait\(\))",
        r"signal\1",
        ("runner/session/worker.py",),
    ),
    Rule(
        r"what happens meanwhile wakes the pause",
        "what happens meanwhile signals the pause",
        ("runner/session/worker.py",),
    ),
    # --- complete, the wide rules --------------------------------------------------------
    Rule(r"\bcommands\.wake\b", "commands.complete_calls"),
    Rule(r"\basync def wake\(", "async def complete_calls("),
    Rule(r"\.wake\b", ".complete_calls"),
    Rule(r"\bwoken\b", "completed", ("runner/cli/session.py", "tests/stores/test_events.py")),
    Rule(r"step/resume/wake scheduler", "step/resume/complete scheduler"),
    Rule(r"\(step, resume, wake, workers\)", "(step, resume, complete, workers)"),
    Rule(r"token \(`wake`\)", "token (`complete_calls`)"),
    Rule(
        r"commands\.py: wake and the operator's", "commands.py: complete_calls and the operator's"
    ),
    Rule(r"\(`wake` re-enters it", "(`complete_calls` re-enters it"),
    Rule(r"How often `wake` re-reads", "How often `complete_calls` re-reads"),
    Rule(r"; wake gave up,", "; completing its calls gave up,"),
    Rule(r"the engine's `wake`", "the engine's `complete_calls`"),
    Rule(r"start, step, resume, wake and inspect", "start, step, resume, complete and inspect"),
    Rule(
        r"Durable sessions: start, wake, inspect\.", "Durable sessions: start, complete, inspect."
    ),
    Rule(r"\bwake \+ resume\b", "complete + resume"),
    Rule(r"\bwake by token, then resume\b", "complete by token, then resume"),
    Rule(r"step / resume / wake over", "step / resume / complete_calls over"),
    Rule(r"\bdef test_wake_is_idempotent", "def test_complete_calls_is_idempotent"),
    Rule(r"\(a step, a wake, a commit\)", "(a step, a completion, a commit)"),
    # --- notify (the stores' docstrings) -------------------------------------------------
    Rule(r"\bwakes `wait_for_", "notifies `wait_for_", STORES),
    Rule(r"\bWake `wait_for_", "Notify `wait_for_", STORES),
    Rule(
        r"`wait_for_events` wakes on this process's own commits",
        "`wait_for_events` is notified of this process's own commits",
        STORES,
    ),
    Rule(r"\bwake idle workers\b", "notify idle session workers", STORES),
    Rule(r"\bwaking\b", "notifying", STORES),
    Rule(r"\bwakes this process's\b", "notifies this process's", STORES),
    Rule(r"are one wake-up\b", "are one notification", STORES),
    # --- claimer ---------------------------------------------------------------------------
    # ... but not where auth.py names "worker" as the old name it still reads (OLD_ROLES).
    Rule(r'"worker"(?!: "claimer"|, the claimer role\'s old name)', '"claimer"', SERVER_ROLE_FILES),
    Rule(r"\bthe worker token\b", "the claimer token", SERVER_ROLE_FILES),
    Rule(r"\b_WORKER_REPORT_FIELDS\b", "_CLAIMER_REPORT_FIELDS", ("runner/server/visibility.py",)),
    Rule(r"\bdef worker\(self\)", "def claimer(self)", ("runner/server/visibility.py",)),
    Rule(r"\bself\.worker\b", "self.claimer", ("runner/server/visibility.py",)),
    Rule(
        r"\bstore, worker = config\.store\b",
        "store, claimer = config.store",
        ("runner/server/claims.py",),
    ),
    Rule(
        r"store\.claim_calls, body\.tools, worker,",
        "store.claim_calls, body.tools, claimer,",
        ("runner/server/claims.py",),
    ),
    Rule(r"\bclaim\.worker\b", "claim.claimer"),
    Rule(
        r"the worker \{claim\.claimer!r\} that claimed",
        "the claimer {claim.claimer!r} that claimed",
    ),
    Rule(r"\bworker: str\b", "claimer: str", STORES),
    Rule(r"\b(tools|names), worker, ", r"\1, claimer, ", STORES),
    Rule(
        r"\btool, worker, (?=state, expires_ms, lease_ms, continuation = row|state, int\(|"
        r'"held"|now,)',
        "tool, claimer, ",
        STORES,
    ),
    Rule(r'"worker": worker\b', '"claimer": claimer', STORES),
    Rule(r"%\(worker\)s", "%(claimer)s", STORES),
    Rule(r"of `tools` to `worker` ", "of `tools` to `claimer` ", STORES),
)


def files() -> list[Path]:
    found = [ROOT / name for name in FILES if (ROOT / name).is_file()]
    for tree in TREES:
        found += sorted(p for p in (ROOT / tree).rglob("*") if p.suffix in SUFFIXES and p.is_file())
    return [p for p in found if p.relative_to(ROOT).as_posix() not in SKIP]


def rewrite(text: str, relative: str, counts: dict[int, int]) -> str:
    for index, rule in enumerate(RULES):
        if rule.applies(relative):
            text, n = re.subn(rule.pattern, rule.replacement, text)
            counts[index] = counts.get(index, 0) + n
    return text


def tidy(paths: list[Path]) -> None:
    """Sort the imports a rename reordered and re-wrap the lines it lengthened (ruff, as
    the repo's checks do), in the changed files only."""
    ruff = ROOT / ".venv" / "bin" / "ruff"
    command = str(ruff) if ruff.exists() else shutil.which("ruff")
    if command is None or not paths:
        print("ruff not found: run `ruff check --fix --select I` and `ruff format` yourself")
        return
    names = [str(p) for p in paths]
    python = [n for n in names if n.endswith(".py")]
    subprocess.run(
        [command, "check", "--fix", "--select", "I,RUF022", "--quiet", *python], cwd=ROOT
    )
    subprocess.run([command, "format", "--quiet", *names], cwd=ROOT, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a file would change"
    )
    check = parser.parse_args().check
    counts: dict[int, int] = {}
    changed = []
    for path in files():
        relative = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, relative, counts)
        if new != text:
            changed.append(relative)
            if not check:
                path.write_text(new, encoding="utf-8")
    for index, rule in enumerate(RULES):
        if counts.get(index):
            print(f"{counts[index]:4d}  {rule.pattern}  ->  {rule.replacement}")
    if changed and not check:
        tidy([ROOT / c for c in changed if c.endswith((".py", ".md"))])
    verb = "would change" if check else "changed"
    print(f"{verb} {len(changed)} file(s)" + "".join(f"\n  {c}" for c in changed))
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
