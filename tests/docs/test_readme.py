"""The README is a front door (issue 25, item 8): at most 200 lines, naming the two
commands, with a tour whose isolated call and durable session run as written (in a
fresh directory holding only the project's .venv and examples), and links that all land:
every relative link names a file of the repository and, with an anchor, a heading of it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from markdown.extensions.toc import slugify

from tests.docs import blocks
from tests.docs.test_coming_from_agents_exe import left_behind, run_block

README = blocks.ROOT / "README.md"
TOUR = "## A five-minute tour"


def test_the_readme_is_short_and_names_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    (commands,) = blocks.blocks("README.md", "## Two commands")
    assert [line.split()[0] for line in commands.splitlines()] == ["scripts/demo", "scripts/test"]


def test_the_tour_runs_an_isolated_call(tmp_path: Path) -> None:
    isolated = blocks.blocks("README.md", TOUR)[0]
    out = run_block(tmp_path, isolated)
    result = json.loads(out)
    assert result["status"] == "ok" and result["output"]["content"]["stdout"] == "hi\n10001\n"
    assert left_behind(tmp_path) == set()


def test_the_tour_runs_a_durable_session_to_its_answer(tmp_path: Path) -> None:
    session = blocks.blocks("README.md", TOUR)[1]
    out = run_block(tmp_path, session)
    assert out.count("call(s) still open") == 2  # two deferred calls, completed from outside
    assert "All three calls are complete." in out and "- fetch_remote_b: 42" in out
    assert (tmp_path / ".agents-runner" / "tour.db").is_file()
    assert left_behind(tmp_path) == set()


def anchors(page: Path) -> set[str]:
    """The ids MkDocs gives the headings of a page (its toc extension's slugs)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slugify(h.replace("`", ""), "-") for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_every_relative_link_of_the_readme_lands() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(relative) > 20  # the front door is mostly links
    for link in relative:
        path, _, anchor = link.partition("#")
        target = (README.parent / path) if path else README
        assert target.exists(), f"README links to {link}: no such file"
        if anchor:
            assert anchor in anchors(target), f"README links to {link}: no such heading"


def test_the_anchor_check_reads_headings_as_mkdocs_does() -> None:
    ids = anchors(blocks.ROOT / "docs" / "security.md")
    assert "what-serve-accepts-from-the-network" in ids and "audit-trail" in ids


def test_the_agents_exe_section_runs_a_tagged_agent_whose_bash_tool_is_sandboxed(
    tmp_path: Path,
) -> None:
    (block,) = blocks.blocks("README.md", "## Coming from agents-exe")
    out = run_block(tmp_path, block)
    assert '"tag": "FileSystemDirectory"' in out
    # The script ran in the bash-runner container (uid 10001), given the session's UUID.
    assert re.search(r"^5 words, counted by uid 10001 for session [0-9a-f-]{36}$", out, re.M)
    assert left_behind(tmp_path) == set()
