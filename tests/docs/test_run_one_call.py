"""The "Run one call" blocks of docs/isolation.md run as written (issue 24, items 1 and
10): each shell block in a fresh directory holding only the project's .venv (a real
Docker engine and the images of scripts/build-images), reading no file the page did not
make and leaving none behind; the Python example ends without a ResourceWarning (an
unclosed Docker client)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.docs import blocks
from tests.docs.test_coming_from_agents_exe import ROOT, left_behind

PAGE, SECTION = "docs/isolation.md", "## Run one call"


def section() -> str:
    return blocks.section(PAGE, SECTION)


def run_sh(tmp_path: Path, block: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "walk.sh").write_text(block, encoding="utf-8")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    return subprocess.run(["bash", "-euo", "pipefail", "walk.sh"], cwd=tmp_path,
                          env={**os.environ, "TMPDIR": str(scratch)}, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_every_shell_block_runs_in_a_fresh_directory(tmp_path: Path) -> None:
    shell = blocks.blocks(PAGE, SECTION)
    assert len(shell) == 3
    results = []
    for index, block in enumerate(shell):
        where = tmp_path / str(index)
        where.mkdir()
        done = run_sh(where, block)
        assert done.returncode == 0, f"block {index}:\n{block}\n{done.stdout}\n{done.stderr}"
        assert left_behind(where) == {"tmp"}, block  # scratch files only under TMPDIR
        results.append(json.loads(done.stdout.splitlines()[0]))
    shortcut, heredoc, files = results
    assert shortcut["output"]["content"]["stdout"] == "hi\n10001\n"
    assert heredoc["id"] == "t1" and heredoc["output"]["content"]["stdout"] == "hi\n10001\n"
    parts = files["output"]["parts"]
    assert parts[1]["path"] == "out/rows.txt"
    (written,) = (tmp_path / "2" / "tmp").glob("*/results/out/rows.txt")
    assert written.read_text().strip() == "2"


def test_the_python_example_leaves_no_socket_open(tmp_path: Path) -> None:
    block = re.search(r"```python\n(.*?)```", section(), re.S)
    assert block is not None
    (tmp_path / "example.py").write_text(block.group(1), encoding="utf-8")
    done = subprocess.run([sys.executable, "-X", "dev", "-W", "always::ResourceWarning",
                           "example.py"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok "), done.stdout
    assert "ResourceWarning" not in done.stderr, done.stderr
