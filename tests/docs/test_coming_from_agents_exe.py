"""The walkthrough of docs/agents-exe.md runs as written: its shell block, in a fresh
directory holding only the project's .venv and examples, with the scripted model
the page names, and again with agents-exe's agent file verbatim (no provider) against
an OpenAI-compatible server on loopback configured through OPENAI_* variables."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from runner.session import load_agent
from tests.chat_server import ChatServer
from tests.docs import blocks

ROOT = blocks.ROOT
PAGE, SECTION = "docs/agents-exe.md", "## The walkthrough"
SCRIPTED = "A=examples/agents/agents-exe/my-agent.scripted.json"
VERBATIM = "A=examples/agents/agents-exe/my-agent.json"


def walkthrough() -> str:
    (block,) = blocks.blocks(PAGE, SECTION)
    assert SCRIPTED in block
    return block


def run_block(tmp_path: Path, script: str, env: dict[str, str] | None = None) -> str:
    for name in (".venv", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "walk.sh").write_text(script, encoding="utf-8")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "walk.sh"], cwd=tmp_path, env={**environment, **(env or {})},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


def left_behind(directory: Path) -> set[str]:
    """What a block left in the directory it ran in, beyond what run_block put there and
    the stores (.agents-runner/, git-ignored)."""
    return {p.name for p in directory.iterdir()} - {".venv", "examples", "walk.sh",
                                                     ".agents-runner"}  # fmt: skip


def test_the_agent_file_of_the_how_to_loads_as_written() -> None:
    document = json.loads((ROOT / "examples/agents/agents-exe/my-agent.json").read_text())
    assert set(document) == {"slug", "executionMode", "toolCallPolicyConfig"}
    agent = load_agent(ROOT / "examples/agents/agents-exe/my-agent.json")
    assert agent.execution_mode == "asynchronous" and agent.tools == []


def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    out = run_block(tmp_path, walkthrough())
    assert re.search(r"^session-id: s-[0-9a-f-]{36}$", out, re.M)
    assert left_behind(tmp_path) == set()  # no start.txt, result.json, ... in the checkout
    # two deferred calls, listed by `resume` (the turn yielded) and again by `pending`
    assert out.count("disposition: defer (external worker)") == 4
    assert "All three calls are complete." in out
    assert "- fetch_remote_a: 42" in out and "- fetch_remote_b: 42" in out
    assert '"widgets": 42' in out  # fetch_local ran in-process (a built-in, undeclared)


def call(call_id: str, name: str, arguments: dict[str, str]) -> dict[str, object]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"id": call_id, "type": "function", "function": function}


def test_the_walkthrough_with_the_verbatim_file_and_a_model_from_the_environment(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.reply({"role": "assistant", "content": "Fetching.", "tool_calls": [
        call("c1", "fetch_local", {"key": "weather"}),
        call("c2", "fetch_remote_a", {"query": "a"}),
        call("c3", "fetch_remote_b", {"query": "b"}),
    ]})  # fmt: skip
    chat_server.reply({"role": "assistant", "content": "Summary: all three are in."})
    script = walkthrough().replace(SCRIPTED, VERBATIM)
    env = {"OPENAI_BASE_URL": chat_server.url, "OPENAI_API_KEY": "sk-test", "OPENAI_MODEL": "m-1"}
    out = run_block(tmp_path, script, env)
    assert "Summary: all three are in." in out
    assert len(chat_server.requests) == 2 and chat_server.requests[0]["model"] == "m-1"
    assert chat_server.headers[0]["Authorization"] == "Bearer sk-test"
    offered = {t["function"]["name"] for t in chat_server.requests[0]["tools"]}
    assert {"fetch_remote_a", "fetch_remote_b", "build_project"} <= offered
    results = {m["tool_call_id"]: m["content"] for m in chat_server.requests[1]["messages"]
               if m["role"] == "tool"}  # fmt: skip
    assert results["c2"] == "42" and results["c3"] == "42"
    assert "Lyon" in results["c1"]


def test_the_verbatim_file_starts_without_a_key_and_the_first_model_call_names_it(
    tmp_path: Path,
) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [str(ROOT / ".venv/bin/agents-runner"), "--agent-file",
                   str(ROOT / "examples/agents/agents-exe/my-agent.json"), *args]  # fmt: skip
        return subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True,
                              text=True, timeout=120)  # fmt: skip

    started = cli("session", "start", "--prompt", "hello")
    assert started.returncode == 0, started.stderr
    session_id = started.stdout.strip().removeprefix("session-id: ")
    resumed = cli("session", "resume", session_id)
    assert resumed.returncode == 1
    assert "OPENAI_API_KEY" in resumed.stderr and "Traceback" not in resumed.stderr
