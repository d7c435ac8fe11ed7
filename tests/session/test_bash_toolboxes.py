"""agents-exe's bash toolboxes: each script's `describe` a tool, mapped as agents-exe maps
it, its `run` calls through the policy into the bash runner. The scripts are our copies in
tests/fixtures/agents_exe/tools; the runner here is the bash-runner worker as a local
process (tests/docker/test_agents_exe_bash_toolbox.py runs it in its container)."""

from __future__ import annotations

import base64
import json
import logging
import sys

import anyio
import pytest

from runner.session import AgentError, load_agent, parse_agent, with_durable_workflows
from runner.session.bash_tools import BashScript, ScriptArg, command_line
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "agents_exe"
WORKER = [sys.executable, str(REPO / "images" / "bash-runner" / "worker.py")]


@pytest.fixture(autouse=True)
def in_the_repository(monkeypatch):
    """Toolbox paths are relative to the current directory, as in agents-exe."""
    monkeypatch.chdir(REPO)


def helper(tmp_path, **changes: object):
    document = json.loads((FIXTURES / "helper.json").read_text())
    document["contents"].update(changes)
    path = tmp_path / "helper.json"
    path.write_text(json.dumps(document))
    return path


def test_each_script_that_describes_itself_is_a_tool_and_the_others_are_reported(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="runner.session.bash_tools"):
        agent = load_agent(FIXTURES / "helper.json")
    names = [t.name for t in agent.tools]
    assert names == ["bash_chart", "bash_every_mode", "bash_fails", "bash_quiet"]
    every = agent.tool("bash_every_mode")
    assert every is not None and every.kind == "bash"
    assert every.description == "Echoes its arguments, one per calling mode."
    assert every.parameters == {
        "type": "object",
        "properties": {
            "first": {"type": "string", "description": "a positional argument"},
            "level": {"type": "number", "description": "--level VALUE"},
            "tag": {"type": "string", "description": "--tag=VALUE"},
            "body": {"type": "string", "description": "a line on standard input"},
        },
        "required": ["first"],
    }
    assert every.script is not None and every.script.path == str(
        FIXTURES / "tools" / "every-mode.sh"
    )
    reported = caplog.text
    assert "broken-describe.sh is not a tool, left out: `describe` exited with 1" in reported
    assert "describe is not implemented" in reported
    assert "bad-arity.sh is not a tool, left out" in reported and "arity" in reported
    # Every bash tool runs in the bash-runner container unless a rule says otherwise.
    rules = {r.match.tool: r.disposition for r in agent.policy.rules}
    assert set(rules) == set(names)
    assert rules["bash_chart"].spec.image == "agents-runner/bash-runner"
    # The stored definition is all a later process needs: no `describe` again.
    assert parse_agent(agent.to_document(), "stored agent").hash == agent.hash


def test_arguments_are_flattened_as_agents_exe_flattens_them():
    def arg(name: str, mode: str) -> ScriptArg:
        return ScriptArg(name=name, description="", type="string", backing_type="string",
                         arity="optional", mode=mode)  # fmt: skip

    script = BashScript(path="/x", args=[arg("p", "positional"), arg("s", "dashdashspace"),
                                         arg("e", "dashdashequal"), arg("i", "stdin"),
                                         arg("j", "stdin"), arg("q", "positional")])  # fmt: skip
    argv, stdin = command_line(script, {"p": "a b", "s": 2, "e": True, "i": "one", "j": "two"})
    assert argv == ["run", "a b", "--s", "2", "--e=true"] and stdin == "one\ntwo\n"
    with pytest.raises(ValueError, match="argument 'p': expected a string, number or boolean"):
        command_line(script, {"p": {"no": 1}})


def test_calls_run_the_scripts_and_keep_their_results_as_agents_exe_does(tmp_path, store):
    local = {"tag": "runIsolated", "spec": {"tag": "localProcess", "argv": WORKER}}
    rules = [{"tool": t, "disposition": local}
             for t in ("bash_every_mode", "bash_quiet", "bash_chart", "bash_fails")]  # fmt: skip
    agent = load_agent(helper(tmp_path, toolCallPolicyConfig={"rules": rules}))
    report = anyio.run(with_durable_workflows(agent, store).run, "go")
    assert report.status == "completed", report.session.failure_reason
    calls = report.session.calls
    every = calls["e"].result.content
    assert every.startswith("argv: [run] [a b] [--level] [3] [--tag=x=y]\nstdin: hello\n")
    assert f"session: {report.session.id.partition('-')[2]} turn: " in every
    assert calls["q"].result.content == "nothing to report"  # empty-result's AddMessage
    chart = calls["c"].result.content
    assert chart["type"] == "media" and chart["mime_type"] == "image/png"
    assert base64.b64decode(chart["base64_data"]) == b"\x89PNG\r\n\x1a\n\x00\x01"
    failed = calls["f"].result
    assert failed.status == "error" and failed.error_code == "TOOL_FAILED"
    assert "fails.sh exited with 3: the ticket system is down" in failed.content


def test_a_bash_tool_never_runs_in_process(tmp_path, store):
    rules = [{"tool": "bash_every_mode", "disposition": {"tag": "runSync"}}]
    agent = load_agent(helper(tmp_path, toolCallPolicyConfig={"rules": rules}))
    assert agent.policy.rules[0].disposition.tag == "runSync"  # the file's rule is kept
    report = anyio.run(with_durable_workflows(agent, store).run, "go")
    result = report.session.calls["e"].result
    assert result.error_code == "PERMISSION_DENIED" and "never runs in-process" in result.content


@pytest.mark.parametrize(("toolboxes", "message"), [
    ([{"tag": "Somewhere", "contents": {"path": "."}}],
     "bashToolboxes[0].tag: expected 'FileSystemDirectory' or 'SingleTool'"),
    ([{"tag": "FileSystemDirectory", "contents": {"path": "no/such/dir"}}],
     "no/such/dir is not a directory"),
    ([{"tag": "SingleTool", "contents": {"path": "tests/fixtures/agents_exe/tools/NOTES.txt"}}],
     "NOTES.txt is not an executable file"),
    ([{"tag": "FileSystemDirectory", "contents": {"path": ".", "lifetime": "x"}}],
     "bashToolboxes[0].contents.lifetime: not a field of a FileSystemDirectory toolbox"),
])  # fmt: skip
def test_a_toolbox_that_cannot_be_read_is_refused_naming_it(tmp_path, toolboxes, message):
    with pytest.raises(AgentError) as caught:
        load_agent(helper(tmp_path, bashToolboxes=toolboxes))
    assert message in str(caught.value), str(caught.value)


def test_only_an_agent_file_s_toolboxes_are_described():
    contents = json.loads((FIXTURES / "helper.json").read_text())["contents"]
    with pytest.raises(AgentError, match="bashToolboxes: only an agent file's toolboxes"):
        parse_agent(contents, "body.agent")
