"""An agents-exe bash tool under its default policy: its `run` in a hardened bash-runner
container (one call, so one container), its output and agents-exe's variables back."""

from __future__ import annotations

import json

import anyio
import docker

from runner.session import load_agent, with_durable_workflows
from runner.stores import SQLiteStore
from tests.conftest import REPO
from tests.docker.conftest import BASH_IMAGE, labelled_containers

FIXTURES = REPO / "tests" / "fixtures" / "agents_exe"


def test_a_bash_tool_runs_in_the_bash_runner_container_by_default(
    api: docker.APIClient, tmp_path, monkeypatch
):
    api.inspect_image(BASH_IMAGE)
    monkeypatch.chdir(REPO)  # the toolbox path is relative to it, as in agents-exe
    document = json.loads((FIXTURES / "helper.json").read_text())
    document["contents"]["provider"]["responses"] = [
        {"tool_calls": [{"id": "e", "name": "bash_every_mode",
                         "arguments": {"first": "in a box", "body": "from stdin"}}]},
        {"text": "{{result:e}}"},
    ]  # fmt: skip
    path = tmp_path / "helper.json"
    path.write_text(json.dumps(document))
    agent = load_agent(path)
    rule = next(r for r in agent.policy.rules if r.match.tool == "bash_every_mode")
    assert rule.disposition.spec.image == "agents-runner/bash-runner"
    store = SQLiteStore(tmp_path / "state.db")
    try:
        report = anyio.run(with_durable_workflows(agent, store).run, "go")
    finally:
        store.close()
    assert report.status == "completed", report.session.failure_reason
    answer = report.session.final_answer or ""
    assert answer.startswith("argv: [run] [in a box]\nstdin: from stdin\n"), answer
    assert f"session: {report.session.id.partition('-')[2]} turn: " in answer
    assert labelled_containers(api) == []
