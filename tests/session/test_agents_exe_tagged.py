"""agents-exe's tagged agent document (`{"tag": "OpenAIAgentDescription", "contents"}`)
loads into the one Agent, its `apiKeyId` resolved through a keys file whose values never
reach the store, a document or a message. Real SQLite stores, a chat server on 127.0.0.1
(tests/chat_server.py), the fixture files in tests/fixtures/agents_exe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from runner.llm import EnvironmentProvider
from runner.llm.keys import ApiKeys, KeysError, key_variable, read_keys_file
from runner.session import AgentError, load_agent, parse_agent, with_durable_workflows
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "agents_exe"
KEY = "sk-desk-FIXTURE-VALUE"


def desk_file(tmp_path: Path, url: str = "http://127.0.0.1:9/v1", **changes: object) -> Path:
    """The desk fixture with its model at `url` (and `changes` in its contents)."""
    document = json.loads((FIXTURES / "desk.json").read_text())
    document["contents"].update({"modelUrl": url, **changes})
    path = tmp_path / "desk.json"
    path.write_text(json.dumps(document))
    return path


def test_the_tagged_file_loads_into_the_same_agent_as_its_contents(tmp_path):
    keys = read_keys_file(FIXTURES / "secret-keys")
    agent = load_agent(FIXTURES / "desk.json", keys)
    assert agent.slug == "desk" and agent.execution_mode == "asynchronous"
    assert agent.system_prompt == "You sit at the front desk.\nAnswer in one sentence."
    assert agent.provider == EnvironmentProvider(
        baseUrl="http://127.0.0.1:9/v1", model="desk-model", apiKeyId="desk-key"
    ).with_key(keys)
    assert [r.match.tool for r in agent.policy.rules] == ["ticket_lookup"]
    contents = json.loads((FIXTURES / "desk.json").read_text())["contents"]
    assert parse_agent(contents, "contents", keys).hash == agent.hash
    # The stored document keeps the key's id, never its value; it parses back.
    document = agent.to_document()
    assert document["provider"]["apiKeyId"] == "desk-key"
    assert KEY not in json.dumps(document) and KEY not in repr(agent)
    assert parse_agent(document, "stored agent").hash == agent.hash


@pytest.mark.parametrize(("change", "message"), [
    ({"mcpServers": [{"tag": "McpSimpleBinary", "contents": {}}]},
     "contents: mcpServers: not supported yet by agents-runner"),
    ({"builtinToolboxes": [{"tag": "SystemToolbox"}]}, "contents: builtinToolboxes: not supported"),
    ({"openApiToolboxes": [{}]}, "contents: openApiToolboxes: not supported"),
    ({"skillSources": ["x"]}, "contents: skillSources: not supported"),
    ({"flavor": "ClaudeV1"}, "contents: flavor: 'ClaudeV1' is not supported"),
    ({"modelNam": "x"}, "contents: modelNam: Extra inputs are not permitted"),
])  # fmt: skip
def test_what_is_not_read_yet_is_refused_naming_the_field(tmp_path, change, message):
    with pytest.raises(AgentError) as caught:
        load_agent(desk_file(tmp_path, **change))
    assert message in str(caught.value), str(caught.value)


@pytest.mark.parametrize(("document", "message"), [
    ({"tag": "OpenAIAgentDescription", "contents": [1]}, "contents: expected the agent"),
    ({"tag": "ClaudeAgent", "contents": {}}, "tag: expected 'OpenAIAgentDescription'"),
    ({"tag": "OpenAIAgentDescription", "contents": {}, "x": 1}, "x: a tagged agent document"),
    ({"tag": "OpenAIAgentDescription", "contents": {"announce": "a"}},
     "contents: slug: Field required"),
])  # fmt: skip
def test_a_malformed_tagged_document_says_what_and_where(document, message):
    with pytest.raises(AgentError) as caught:
        parse_agent(document, "agent file a.json")
    assert message in str(caught.value), str(caught.value)


def test_the_key_goes_to_the_model_server_and_nowhere_else(tmp_path, store, chat_server):
    keys = read_keys_file(FIXTURES / "secret-keys")
    agent = with_durable_workflows(load_agent(desk_file(tmp_path, chat_server.url), keys), store)
    chat_server.reply({"role": "assistant", "content": "Your ticket is open."})
    report = anyio.run(agent.run, "Where is my ticket?")
    assert report.status == "completed" and report.session.final_answer == "Your ticket is open."
    request, headers = chat_server.requests[0], chat_server.headers[0]
    assert headers["Authorization"] == f"Bearer {KEY}" and request["model"] == "desk-model"
    assert request["messages"][0]["content"].startswith("You sit at the front desk.")
    # Nothing written or shown holds the value: the store's files, the report, the events.
    store.close()
    for path in tmp_path.glob("state.db*"):
        assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in json.dumps(report.to_dict())


def test_a_missing_key_fails_the_first_model_call_saying_where_it_was_looked_for(
    tmp_path, store, chat_server
):
    keys = ApiKeys({"other": "sk-other"}, ("keys file k.json",))
    agent = with_durable_workflows(load_agent(desk_file(tmp_path, chat_server.url), keys), store)
    session = agent.start("hello")  # starting needs no key
    report = anyio.run(agent.resume, session.id)
    assert report.status == "failed" and chat_server.requests == []
    reason = report.session.failure_reason or ""
    assert "apiKeyId 'desk-key': no key with that id (looked in keys file k.json)" in reason
    assert key_variable("desk-key") == "AGENTS_EXE_KEY_DESK_KEY" and "DESK_KEY" in reason


def test_a_key_variable_wins_over_the_file():
    keys = read_keys_file(FIXTURES / "secret-keys").with_variables(
        {"AGENTS_EXE_KEY_DESK_KEY": "sk-from-env", "PATH": "/bin"}
    )
    assert keys.get("desk-key") == "sk-from-env" and keys.get("other") == "sk-other"
    assert "sk-from-env" not in repr(keys) and "sk-other" not in repr(keys)


@pytest.mark.parametrize(("text", "message"), [
    ("{", "is not valid JSON"),
    ('{"keys": {}}', 'expected {"keys": [{"id": ..., "value": ...}]}'),
    ('{"keys": [{"id": "a", "value": "sk-1"}, {"id": "a", "value": "sk-2"}]}',
     "keys[1]: the id 'a' is given twice"),
    ('{"keys": [{"id": "a", "value": 7}]}', "keys[0]: `id` and `value` must be strings"),
])  # fmt: skip
def test_a_bad_keys_file_is_named_and_its_values_are_not(tmp_path, text, message):
    path = tmp_path / "secret-keys"
    path.write_text(text)
    with pytest.raises(KeysError) as caught:
        read_keys_file(path)
    assert message in str(caught.value) and str(path) in str(caught.value)
    assert "sk-1" not in str(caught.value) and "sk-2" not in str(caught.value)


# --- from the command line ----------------------------------------------------------------


def cli(cwd: Path, *args: str, env: dict[str, str], code: int = 0) -> str:
    done = subprocess.run([sys.executable, "-m", "runner.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120, env=env)  # fmt: skip
    assert done.returncode == code, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done.stdout + done.stderr


def test_run_finds_the_keys_where_agents_exe_keeps_them_or_where_told(tmp_path, chat_server):
    home = tmp_path / "home"
    (home / ".config" / "agents-exe").mkdir(parents=True)
    shutil.copy(FIXTURES / "secret-keys", home / ".config" / "agents-exe" / "secret-keys")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTS_", "OPENAI_"))}
    env["HOME"] = str(home)
    path = desk_file(tmp_path, chat_server.url)
    chat_server.reply({"role": "assistant", "content": "Open."})
    out = cli(tmp_path, "--agent-file", str(path), "run", "--prompt", "ticket?", env=env)
    assert out.startswith("Open.\n") and chat_server.headers[0]["Authorization"] == f"Bearer {KEY}"
    # --api-keys names another file; a bad one fails the command, naming it.
    other = tmp_path / "keys.json"
    other.write_text('{"keys": [{"id": "desk-key", "value": "sk-given"}]}')
    chat_server.reply({"role": "assistant", "content": "Closed."})
    cli(tmp_path, "--api-keys", str(other), "run", "--agent-file", str(path), "--prompt", "?",
        env=env)  # fmt: skip
    assert chat_server.headers[1]["Authorization"] == "Bearer sk-given"
    other.write_text("{")
    out = cli(tmp_path, "--api-keys", str(other), "run", "--agent-file", str(path),
              "--prompt", "?", env=env, code=2)  # fmt: skip
    assert f"--api-keys: keys file {other} is not valid JSON" in out
    # The store and what the commands show never hold a value.
    shown = cli(tmp_path, "session", "list", "--json", env=env)
    assert KEY not in shown and "sk-given" not in shown
    for db in (tmp_path / ".agents-runner").glob("state.db*"):
        assert KEY.encode() not in db.read_bytes() and b"sk-given" not in db.read_bytes()
