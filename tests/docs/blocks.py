"""The fenced blocks of README.md and docs/*.md: a page's sections, and its shell blocks
with the heading each sits under. The tests that run the docs' examples read them from
here, and test_shell_blocks.py checks that every shell block is run by one of them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The languages a fenced block of shell commands is tagged with.
SHELL = ("sh", "bash", "shell", "console")
_FENCE = re.compile(r"^```(\S*)\s*$")
_HEADING = re.compile(r"^(#{1,6}) ")


def pages() -> list[str]:
    """README.md and every page of the site, as paths relative to the repository."""
    return ["README.md", *sorted(p.relative_to(ROOT).as_posix()
                                 for p in (ROOT / "docs").rglob("*.md"))]  # fmt: skip


def section(page: str, heading: str) -> str:
    """The text under `heading` (a whole line, e.g. "## Run one call") up to the next
    heading of the same or a higher level, fenced blocks included."""
    lines = (ROOT / page).read_text(encoding="utf-8").split("\n")
    level = len(heading) - len(heading.lstrip("#"))
    assert heading in lines, f"{page} has no heading {heading!r}"
    out: list[str] = []
    fenced = False
    for line in lines[lines.index(heading) + 1 :]:
        if _FENCE.match(line):
            fenced = not fenced
        found = None if fenced else _HEADING.match(line)
        if found and len(found.group(1)) <= level:
            break
        out.append(line)
    return "\n".join(out)


def blocks(page: str, heading: str, language: str = "sh") -> list[str]:
    """The fenced blocks tagged `language` in that section, in order."""
    return re.findall(rf"^```{re.escape(language)}\n(.*?)^```", section(page, heading),
                      re.S | re.M)  # fmt: skip


@dataclass(frozen=True)
class Block:
    page: str
    heading: str  # the nearest heading above the block ("" before the first)
    index: int  # among the shell blocks under that heading, from 0
    language: str
    text: str


def shell_blocks(page: str) -> list[Block]:
    """Every shell block of a page, with the heading it sits under."""
    found: list[Block] = []
    heading, language, body = "", None, []
    counts: dict[str, int] = {}
    for line in (ROOT / page).read_text(encoding="utf-8").split("\n"):
        fence = _FENCE.match(line)
        if language is None and fence:
            language, body = fence.group(1), []
        elif language is not None and line.startswith("```"):
            if language in SHELL:
                index = counts.get(heading, 0)
                counts[heading] = index + 1
                found.append(Block(page, heading, index, language, "\n".join(body) + "\n"))
            language = None
        elif language is not None:
            body.append(line)
        elif _HEADING.match(line):
            heading = line
    return found
