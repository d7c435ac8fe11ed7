"""The walkthrough of docs/server.md runs as written: its shell block, in a fresh directory
holding only the project's .venv and examples, starts a real `agents-runner serve` with the
token file it makes, drives the seed's flow with curl, and stops the server with SIGTERM."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.docs import blocks
from tests.docs.test_coming_from_agents_exe import left_behind, run_block
from tests.server.processes import free_port

PAGE, SECTION = "docs/server.md", "## The walkthrough"
#: Run before the block, not part of it: should the block fail half way, the server it
#: started in the background is stopped all the same.
CLEANUP = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"


def walkthrough() -> str:
    (block,) = blocks.blocks(PAGE, SECTION)
    return block


def test_the_server_walkthrough_runs_as_written(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {"AGENTS_RUNNER_PORT": str(free_port()), "TMPDIR": str(scratch)}
    out = run_block(tmp_path, CLEANUP + walkthrough(), env)
    pending = [json.loads(line) for line in out.splitlines() if line.startswith('{"tool"')]
    assert [call["tool"] for call in pending] == ["fetch_remote_a", "fetch_remote_b"]
    # Both continuations applied (the second with resume), then the session's status
    # (agents-server's, then ours).
    assert '\n"applied"\n"applied"\nidle\ncompleted\n' in out
    assert "All three calls are complete." in out
    assert "- fetch_remote_a: 42" in out and "- fetch_remote_b: 42" in out
    # The token file holds the hash, never the token.
    (made,) = scratch.glob("*/tokens.json")  # made in a scratch directory
    (grant,) = json.loads(made.read_text())
    assert re.fullmatch(r"[0-9a-f]{64}", grant["sha256"]) and grant["role"] == "operator"
    assert (tmp_path / ".agents-runner" / "server.db").is_file()
    assert left_behind(tmp_path) == {"tmp"}  # nothing in the directory it ran in
