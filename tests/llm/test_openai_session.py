"""The OpenAI-compatible provider driving a whole session, against a local server."""

from __future__ import annotations

import json

import anyio

from runner.session import parse_agent, with_durable_workflows
from runner.stores import SQLiteStore


def agent_document(url: str) -> dict:
    return {
        "slug": "http",
        "provider": {"tag": "openaiCompatible", "baseUrl": url, "model": "m-1",
                     "apiKeyEnv": "TEST_LLM_KEY"},
        "system_prompt": "be brief",
        "tools": [{"name": "echo", "description": "echo back",
                   "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}],
    }  # fmt: skip


def test_a_tool_call_round_trip_through_a_session(chat_server, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "sk-test")
    chat_server.reply({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_9", "type": "function",
         "function": {"name": "echo", "arguments": "{\"x\": 5}"}}]})  # fmt: skip
    chat_server.reply({"role": "assistant", "content": "x was 5"})
    agent = with_durable_workflows(parse_agent(agent_document(chat_server.url)),
                                   SQLiteStore(tmp_path / "s.db"))  # fmt: skip
    report = anyio.run(agent.run, "what is x?")
    assert report.status == "completed" and report.session.final_answer == "x was 5"
    first, second = chat_server.requests
    assert chat_server.headers[0]["Authorization"] == "Bearer sk-test"
    assert first["model"] == "m-1"
    assert first["messages"] == [{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": "what is x?"}]  # fmt: skip
    assert first["tools"][0]["function"]["name"] == "echo"
    assistant, tool = second["messages"][2:]
    assert assistant["tool_calls"][0]["id"] == "call_9"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"x": 5}
    assert tool == {"role": "tool", "tool_call_id": "call_9", "content": '{"x": 5}'}
