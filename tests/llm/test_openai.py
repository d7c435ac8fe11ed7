"""The OpenAI-compatible provider against a local chat-completions server, on its own
(tests/llm/test_openai_session.py drives it through a session)."""

from __future__ import annotations

import logging
import socket

import anyio
import pytest

from runner.llm import (
    LLMClosedError,
    LLMError,
    LLMRequest,
    Message,
    OpenAICompatibleLLM,
    OpenAIProvider,
    ScriptedLLM,
    ScriptedProvider,
    provider_for,
)
from runner.llm.openai import MAX_BACKOFF_S


def request() -> LLMRequest:
    return LLMRequest("", (Message("user", "hi"),))


def run(llm: OpenAICompatibleLLM, *requests: LLMRequest):
    """Send the requests in one event loop (a client's pool belongs to one) and close."""

    async def main():
        async with llm:
            return [await llm.complete(r) for r in requests][-1]

    return anyio.run(main)


def test_http_429_is_retried_after_retry_after(chat_server, waits, caplog):
    chat_server.reply({"error": "slow down"}, status=429, headers={"Retry-After": "2"})
    chat_server.reply({"role": "assistant", "content": "hello"})

    async def main():
        async with OpenAICompatibleLLM(chat_server.url, "m", max_retries=2, sleep=waits) as llm:
            return await llm.complete(request())

    with caplog.at_level(logging.WARNING, logger="runner.llm.openai"):
        assert anyio.run(main).text == "hello"
    assert len(chat_server.requests) == 2 and waits.delays == [2.0]
    assert "attempt 1 of 3 failed (HTTP 429); retrying in 2.00s" in caplog.text


def test_retry_after_is_capped_and_an_unreadable_one_falls_back_to_backoff(chat_server, waits):
    chat_server.reply({"error": "later"}, status=429, headers={"Retry-After": "3600"})
    chat_server.reply({"error": "later"}, status=503, headers={"Retry-After": "soon"})
    chat_server.reply({"role": "assistant", "content": "ok"})
    llm = OpenAICompatibleLLM(chat_server.url, "m", max_retries=2, backoff_s=1.0, sleep=waits)
    assert run(llm, request()).text == "ok"
    capped, fallback = waits.delays
    assert capped == MAX_BACKOFF_S and 1.0 <= fallback <= 3.0  # 1 s * 2 * jitter [0.5, 1.5)


def test_http_500_exhausts_the_retries_with_a_clear_error(chat_server, waits):
    for _ in range(3):
        chat_server.reply({"error": "boom"}, status=500)
    llm = OpenAICompatibleLLM(chat_server.url, "m", max_retries=2, backoff_s=1.0, sleep=waits)
    with pytest.raises(LLMError, match="HTTP 500 after 3 attempt") as caught:
        run(llm, request())
    assert caught.value.retryable and len(chat_server.requests) == 3
    first, second = waits.delays  # exponential, with jitter in [0.5, 1.5)
    assert 0.5 <= first < 1.5 and 1.0 <= second < 3.0


def test_an_unreachable_server_is_retried_then_a_retryable_error(waits):
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    llm = OpenAICompatibleLLM(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, sleep=waits)
    with pytest.raises(LLMError, match=r"ConnectError.* after 2 attempt") as caught:
        run(llm, request())
    assert caught.value.retryable and len(waits.delays) == 1


def test_requests_reuse_one_client_and_one_connection(chat_server):
    chat_server.reply({"role": "assistant", "content": "one"})
    chat_server.reply({"role": "assistant", "content": "two"})
    llm = OpenAICompatibleLLM(chat_server.url, "m")
    assert llm.state == "new"

    async def main():
        first = await llm.complete(request())
        client = llm._client
        second = await llm.complete(request())
        assert llm._client is client and llm.state == "open"
        await llm.aclose()
        return first.text, second.text

    assert anyio.run(main) == ("one", "two")
    assert chat_server.connections == 1 and len(chat_server.requests) == 2


def test_a_closed_client_refuses_requests_and_closing_twice_is_harmless(chat_server):
    chat_server.reply({"role": "assistant", "content": "once"})

    async def main():
        async with OpenAICompatibleLLM(chat_server.url, "m") as llm:
            assert (await llm.complete(request())).text == "once"
        assert llm.state == "closed"
        await llm.aclose()
        with pytest.raises(LLMClosedError, match="closed") as caught:
            await llm.complete(request())
        assert not caught.value.retryable

        never_used = OpenAICompatibleLLM(chat_server.url, "m")
        await never_used.aclose()
        with pytest.raises(LLMClosedError):
            await never_used.complete(request())

    anyio.run(main)
    assert len(chat_server.requests) == 1


def test_closing_while_backing_off_stops_the_retries(chat_server):
    chat_server.reply({"error": "busy"}, status=503)
    llm: OpenAICompatibleLLM

    async def close_instead_of_sleeping(seconds: float) -> None:
        await llm.aclose()

    llm = OpenAICompatibleLLM(chat_server.url, "m", max_retries=3, sleep=close_instead_of_sleeping)
    with pytest.raises(LLMClosedError, match="this provider is closed"):
        run(llm, request())
    assert len(chat_server.requests) == 1


def test_client_errors_and_malformed_replies_are_not_retried(chat_server):
    chat_server.reply({"error": "bad key"}, status=401)
    with pytest.raises(LLMError, match="HTTP 401") as caught:
        run(OpenAICompatibleLLM(chat_server.url, "m", max_retries=2), request())
    assert not caught.value.retryable and len(chat_server.requests) == 1
    chat_server.replies.append((200, {}, {"choices": []}))
    with pytest.raises(LLMError, match="malformed chat-completions reply"):
        run(OpenAICompatibleLLM(chat_server.url, "m", max_retries=2), request())


def test_a_missing_api_key_variable_is_named(monkeypatch):
    monkeypatch.delenv("TEST_LLM_KEY", raising=False)
    config = OpenAIProvider(baseUrl="http://127.0.0.1:9/v1", model="m", apiKeyEnv="TEST_LLM_KEY")
    llm = provider_for(config)  # made: a session with it fails at its first model call
    with pytest.raises(LLMError, match="TEST_LLM_KEY") as raised:
        anyio.run(llm.complete, request())
    assert raised.value.retryable is False


def test_provider_for_builds_the_llm_a_provider_section_names(monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "sk-test")
    config = OpenAIProvider.model_validate(
        {"baseUrl": "http://127.0.0.1:9/v1/", "model": "m-2", "apiKeyEnv": "TEST_LLM_KEY",
         "timeoutSeconds": 5, "maxRetries": 4}
    )  # fmt: skip
    llm = provider_for(config)
    assert isinstance(llm, OpenAICompatibleLLM)
    assert (llm.url, llm.model, llm.api_key) == ("http://127.0.0.1:9/v1/chat/completions",
                                                 "m-2", "sk-test")  # fmt: skip
    assert (llm.timeout_s, llm.max_retries) == (5.0, 4)
    scripted = provider_for(ScriptedProvider(responses=[{"text": "hi"}]))
    assert isinstance(scripted, ScriptedLLM) and scripted.responses == [{"text": "hi"}]
