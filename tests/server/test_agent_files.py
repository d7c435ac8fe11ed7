"""intake.AgentFiles: a create by name or slug reads an agent file (and asks its bash
toolbox scripts to `describe` themselves, on the host) once while the file is unchanged,
not on every request: an unknown slug would otherwise load the whole directory each time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.server.intake import AgentFiles, agent_of
from runner.server.problems import Problem

DESCRIBE = """#!/bin/sh
if [ "$1" = describe ]; then
    echo described >> "{log}"
    echo '{{"slug": "count", "description": "counts", "args": []}}'
fi
"""


def agents_dir(tmp_path: Path) -> tuple[Path, Path]:
    tools, log = tmp_path / "tools", tmp_path / "describes.log"
    tools.mkdir()
    script = tools / "count.sh"
    script.write_text(DESCRIBE.format(log=log))
    script.chmod(0o755)
    agents = tmp_path / "agents"
    agents.mkdir()
    document = {"tag": "OpenAIAgentDescription", "contents": {
        "slug": "counter", "flavor": "OpenAIv1", "modelUrl": "http://127.0.0.1:9/v1",
        "modelName": "m", "announce": "counts", "systemPrompt": ["count"],
        "bashToolboxes": [{"tag": "FileSystemDirectory",
                           "contents": {"path": str(tools)}}]}}  # fmt: skip
    (agents / "counter.json").write_text(json.dumps(document))
    return agents, log


def describes(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_a_file_is_read_and_described_once_while_it_is_unchanged(tmp_path: Path) -> None:
    agents, log = agents_dir(tmp_path)
    files = AgentFiles()
    first = agent_of("counter", agents, None, files=files)  # by slug
    assert agent_of("counter.json", agents, None, files=files) == first  # by name
    with pytest.raises(Problem) as unknown:
        agent_of("no-such-agent", agents, None, files=files)
    assert unknown.value.status == 404
    assert describes(log) == 1
    path = agents / "counter.json"
    path.write_text(path.read_text() + "\n")  # changed: read again
    assert agent_of("counter", agents, None, files=files) == first
    assert describes(log) == 2


def test_a_file_that_does_not_load_is_refused_each_time_and_kept_bounded(tmp_path: Path) -> None:
    agents, _ = agents_dir(tmp_path)
    (agents / "broken.json").write_text("{")
    files = AgentFiles(limit=1)
    for _ in range(2):
        with pytest.raises(Problem) as refused:
            agent_of("broken.json", agents, None, files=files)
        assert refused.value.status == 422 and "not valid JSON" in refused.value.detail
    agent_of("counter.json", agents, None, files=files)
    assert len(files._kept) == 1  # the bound is the point of the test


@pytest.mark.parametrize("name", ["x" * 5000, "a\x00b", "../counter.json", ".counter.json", ""])
def test_a_name_that_cannot_be_a_file_here_is_no_agent(tmp_path: Path, name: str) -> None:
    """Never the file system's error (a 5000-character name was ENAMETOOLONG: a 500)."""
    agents, _ = agents_dir(tmp_path)
    with pytest.raises(Problem) as unknown:
        agent_of(name, agents, None, files=AgentFiles())
    assert unknown.value.status == 404 and unknown.value.kind == "unknown_agent"
