"""The OpenAI-compatible provider against a local chat-completions server."""

from __future__ import annotations

import json

import anyio
import pytest

from runner.llm import LLMError, LLMRequest, Message, OpenAICompatibleLLM, provider_for
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


def request() -> LLMRequest:
    return LLMRequest("", (Message("user", "hi"),))


def test_http_429_is_retried_after_retry_after(chat_server):
    chat_server.reply({"error": "slow down"}, status=429, headers={"Retry-After": "0"})
    chat_server.reply({"role": "assistant", "content": "hello"})
    llm = OpenAICompatibleLLM(chat_server.url, "m", max_retries=2)
    assert anyio.run(llm.complete, request()).text == "hello"
    assert len(chat_server.requests) == 2


def test_http_500_exhausts_the_retries_with_a_clear_error(chat_server):
    for _ in range(3):
        chat_server.reply({"error": "boom"}, status=500)
    llm = OpenAICompatibleLLM(chat_server.url, "m", max_retries=2, backoff_s=0.01)
    with pytest.raises(LLMError, match="HTTP 500 after 3 attempt") as caught:
        anyio.run(llm.complete, request())
    assert caught.value.retryable and len(chat_server.requests) == 3


def test_client_errors_and_malformed_replies_are_not_retried(chat_server):
    chat_server.reply({"error": "bad key"}, status=401)
    llm = OpenAICompatibleLLM(chat_server.url, "m", max_retries=2)
    with pytest.raises(LLMError, match="HTTP 401") as caught:
        anyio.run(llm.complete, request())
    assert not caught.value.retryable
    chat_server.replies.append((200, {}, {"choices": []}))
    with pytest.raises(LLMError, match="malformed chat-completions reply"):
        anyio.run(llm.complete, request())


def test_a_missing_api_key_variable_is_named(monkeypatch):
    monkeypatch.delenv("TEST_LLM_KEY", raising=False)
    agent = parse_agent(agent_document("http://127.0.0.1:9/v1"))
    with pytest.raises(LLMError, match="TEST_LLM_KEY"):
        provider_for(agent.provider)
