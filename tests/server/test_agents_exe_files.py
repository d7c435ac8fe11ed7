"""`serve --agents DIR` with agents-exe's tagged agent files: a session made from one by
name runs with the key its apiKeyId names (read with the server's keys at start), and
the key is in no stored document and no answer. A real uvicorn and a chat server, both
on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx

from runner.llm.keys import read_keys_file
from runner.server import create_app
from runner.session import Engine
from runner.session.settings import AgentSettings
from runner.stores import SQLiteStore
from tests.conftest import REPO
from tests.server.conftest import serving
from tests.server.test_problems import problem

FIXTURES = REPO / "tests" / "fixtures" / "agents_exe"
KEY = "sk-desk-FIXTURE-VALUE"


def test_a_tagged_agent_file_runs_by_name_with_the_server_s_keys(tmp_path: Path, chat_server):
    agents = tmp_path / "agents"
    agents.mkdir()
    document = json.loads((FIXTURES / "desk.json").read_text())
    document["contents"]["modelUrl"] = chat_server.url
    (agents / "desk.json").write_text(json.dumps(document))
    settings = AgentSettings(api_keys=read_keys_file(FIXTURES / "secret-keys"))
    store = SQLiteStore(tmp_path / "s.db")
    try:
        app = create_app(store, agents, None, agents=settings)
        with serving(app) as url:
            made = httpx.post(f"{url}/v1/sessions", json={"agent": "desk.json", "prompt": "hi"})
            assert made.status_code == 201, made.text
            session_id = made.json()["session_id"]
            shown = httpx.get(f"{url}/v1/sessions/{session_id}")
            assert shown.status_code == 200 and KEY not in shown.text and KEY not in made.text
            # An inline agent may not name one of the server's keys.
            inline = {"slug": "x", "modelUrl": "http://127.0.0.1:9/v1", "apiKeyId": "desk-key"}
            refused = httpx.post(f"{url}/v1/sessions", json={"agent": inline, "prompt": "hi"})
            assert "body.agent: apiKeyId: an inline agent names no key" in str(
                problem(refused, 422)["detail"])  # fmt: skip
            # Nor give a bash tool's script: the server would read a file the request names.
            tool = {"name": "bash_x", "kind": "bash", "script": {"path": "/etc/hostname",
                                                                 "args": []}}  # fmt: skip
            refused = httpx.post(f"{url}/v1/sessions", json={
                "agent": {"slug": "x", "tools": [tool]}, "prompt": "hi"})  # fmt: skip
            assert "body.agent: tools[0].script: an inline agent has no bash toolbox" in str(
                problem(refused, 422)["detail"])  # fmt: skip
            # The server read the file at start into its engine's keyring: an engine given
            # that keyring (as serve's session worker is) runs the session with the key.
            chat_server.reply({"role": "assistant", "content": "Hello."})
            keyring = app.state.settings.engine.keyring
            report = anyio.run(Engine(store, keyring=keyring).resume, session_id)
        assert report.status == "completed" and report.session.final_answer == "Hello."
        assert chat_server.headers[0]["Authorization"] == f"Bearer {KEY}"
        assert KEY not in json.dumps(store.load(session_id).model_dump(mode="json"))
    finally:
        store.close()
    for path in tmp_path.glob("s.db*"):
        assert KEY.encode() not in path.read_bytes()
