"""The agent file as agents-exe writes it: loaded verbatim, its model from the environment,
its policy naming tools the file never declares, `localProcess` with `path`, `cache` with
`key`. Real SQLite stores, the scripted provider or a chat server on 127.0.0.1."""

from __future__ import annotations

import json
import stat
import sys
from dataclasses import replace

import anyio
import pytest

from runner.llm import (
    EnvironmentLLM,
    EnvironmentProvider,
    LLMError,
    LLMRequest,
    Message,
    ScriptedLLM,
    provider_for,
)
from runner.session import AgentError, ToolResult, load_agent, parse_agent, with_durable_workflows
from runner.session.prompt import undeclared_parameters
from tests.conftest import REPO
from tests.session.conftest import FINAL, Counter, agent_doc, calls

#: The file of the agents-exe how-to, byte for byte.
AGENTS_EXE_FILE = """{
  "slug": "my-agent",
  "executionMode": "asynchronous",
  "toolCallPolicyConfig": {
    "default": {"tag": "runSync"},
    "rules": [
      {"tool": "fetch_remote_a", "disposition": {"tag": "defer", "reason": "external worker"}},
      {"tool": "fetch_remote_b", "disposition": {"tag": "defer", "reason": "external worker"}},
      {"tool": "build_project", "disposition": {"tag": "runAsync"}}
    ]
  }
}
"""
VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL")
PYTHON_WORKER = REPO / "examples" / "workers" / "python" / "worker.py"


@pytest.fixture
def agent_file(tmp_path, monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "my-agent.json"
    path.write_text(AGENTS_EXE_FILE, encoding="utf-8")
    return path


def tool_call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip


# --- loading ----------------------------------------------------------------------------


def test_the_how_to_file_loads_verbatim_with_the_environment_provider(agent_file):
    agent = load_agent(agent_file)
    assert agent.slug == "my-agent" and agent.execution_mode == "asynchronous"
    assert agent.provider == EnvironmentProvider() and agent.tools == []
    rules = {r.match.tool: r.disposition.tag for r in agent.policy.rules}
    assert rules == {"fetch_remote_a": "defer", "fetch_remote_b": "defer",
                     "build_project": "runAsync"}  # fmt: skip
    # The stored definition parses back to the same agent, with the same hash.
    again = parse_agent(agent.to_document(), "stored agent")
    assert again == agent and again.hash == agent.hash == load_agent(agent_file).hash


def test_agents_exe_model_fields_map_onto_the_provider_and_system_prompt():
    agent = parse_agent({"slug": "demo-openai", "flavor": "OpenAIv1",
                         "modelUrl": "http://127.0.0.1:9/v1", "modelName": "gpt-4.1-mini",
                         "announce": "The main agent.",
                         "systemPrompt": ["You help.", "Be brief."]})  # fmt: skip
    assert agent.provider == EnvironmentProvider(baseUrl="http://127.0.0.1:9/v1",
                                                 model="gpt-4.1-mini")  # fmt: skip
    assert agent.system_prompt == "You help.\nBe brief."
    assert parse_agent(agent.to_document()) == agent


@pytest.mark.parametrize(("extra", "message"), [
    ({"apiKeyId": ""}, "apiKeyId: expected a non-empty string"),
    ({"modelUrl": "ftp://x"}, "modelUrl: expected an http:// or https:// URL"),
    ({"flavor": "Mistral"}, "flavor: 'Mistral' is not supported; agents-runner speaks OpenAI's"),
    ({"flavor": "ClaudeV1"}, "flavor: 'ClaudeV1' is not supported"),
    ({"modelName": "m", "provider": {"tag": "scripted", "responses": []}},
     "modelName: give the model as `provider` or as agents-exe's modelUrl/modelName"),
    ({"systemPrompt": [1]}, "systemPrompt: expected a string or a list of strings"),
    ({"toolCallPolicyConfig": {"rules": [{"tol": "x", "disposition": {"tag": "runSync"}}]}},
     "toolCallPolicyConfig.rules[0].match: Field required"),
    ({"modelname": "m"}, "modelname: Extra inputs are not permitted"),
])  # fmt: skip
def test_typos_and_what_cannot_map_are_refused_with_their_path(extra, message):
    with pytest.raises(AgentError) as caught:
        parse_agent({"slug": "x", **extra})
    assert message in str(caught.value)


# --- the model from the environment -------------------------------------------------------


def test_without_a_key_loading_and_starting_work_and_the_first_model_call_names_the_variables(
    agent_file, store
):
    agent = with_durable_workflows(load_agent(agent_file), store)
    session = agent.start("Fetch the local and remote data")
    assert store.load(session.id).status == "running"
    with pytest.raises(LLMError) as caught:
        anyio.run(provider_for(agent.agent.provider).complete, LLMRequest("", ()))
    for name in VARIABLES:
        assert name in str(caught.value)
    assert not caught.value.retryable
    # Advancing the session makes that first call: it fails, saying what to set.
    report = anyio.run(agent.resume, session.id)
    assert report.status == "failed"
    assert "OPENAI_API_KEY and OPENAI_MODEL are unset" in (report.session.failure_reason or "")


def test_the_model_variable_is_required_even_with_a_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    with pytest.raises(LLMError, match="OPENAI_MODEL is unset or empty"):
        EnvironmentLLM(EnvironmentProvider()).resolve()
    llm = EnvironmentLLM(EnvironmentProvider(model="from-file"), {"OPENAI_API_KEY": "k"})
    assert llm.resolve().url == "https://api.openai.com/v1/chat/completions"
    assert llm.resolve().model == "from-file"


def test_the_environment_provider_talks_to_a_real_server(agent_file, store, chat_server,
                                                          monkeypatch):  # fmt: skip
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    chat_server.reply({"role": "assistant", "content": None, "tool_calls": [
        tool_call("a", "fetch_remote_a", {"query": "orders"}),
        tool_call("l", "fetch_local", {"key": "inventory"}),
    ]})  # fmt: skip
    agent = with_durable_workflows(load_agent(agent_file), store)
    report = anyio.run(agent.run, "Fetch the data")
    assert report.status == "waiting"
    assert report.session.calls["l"].result.content["value"] == {"widgets": 42, "gadgets": 7}
    request, headers = chat_server.requests[0], chat_server.headers[0]
    assert request["model"] == "env-model" and headers["Authorization"] == "Bearer sk-env"
    # The model is told of the tools the policy names, though the file declares none.
    told = {t["function"]["name"]: t["function"] for t in request["tools"]}
    assert set(told) == {"fetch_remote_a", "fetch_remote_b", "build_project"}
    assert "external worker" in told["fetch_remote_a"]["description"]
    assert told["build_project"]["parameters"] == undeclared_parameters()
    token = report.session.calls["a"].token
    anyio.run(agent.complete_calls, report.session.id, [(token, ToolResult.ok({"orders": 3}))])
    chat_server.reply({"role": "assistant", "content": "3 orders"})
    final = anyio.run(agent.resume, report.session.id)
    assert final.status == "completed" and final.session.final_answer == "3 orders"
    tool_messages = [m for m in chat_server.requests[1]["messages"] if m["role"] == "tool"]
    assert {m["tool_call_id"]: m["content"] for m in tool_messages}["a"] == '{"orders": 3}'


# --- undeclared tools ---------------------------------------------------------------------


def test_the_how_to_file_with_a_script_defers_runs_built_ins_and_reports_unknown_tools(
    agent_file, store
):
    script = ScriptedLLM([
        {"tool_calls": [{"id": "l", "name": "fetch_local", "arguments": {"key": "weather"}},
                        {"id": "a", "name": "fetch_remote_a", "arguments": {"q": "x"}},
                        {"id": "b", "name": "fetch_remote_b", "arguments": {"q": "y"}},
                        {"id": "p", "name": "build_project", "arguments": {}}]},
        {"text": "l={{result:l}} a={{result:a}} b={{result:b}} p={{result:p}}"},
    ])  # fmt: skip
    agent = replace(with_durable_workflows(load_agent(agent_file), store), llm=script)
    report = anyio.run(agent.run, "go")
    assert report.status == "waiting"
    session = report.session
    assert {i: c.state for i, c in session.calls.items()} == {
        "l": "completed", "a": "deferred", "b": "deferred", "p": "failed"}  # fmt: skip
    assert session.calls["a"].defer_reason == "external worker"
    assert session.calls["p"].result.error_code == "UNKNOWN_TOOL"
    results = [(c.token, ToolResult.ok(f"from {c.tool}")) for c in session.waiting_on()]
    anyio.run(agent.complete_calls, session.id, results)
    final = anyio.run(agent.resume, session.id).session.final_answer
    assert final.startswith('l={"key": "weather"')
    assert "a=from fetch_remote_a b=from fetch_remote_b" in final
    assert "p=[error UNKNOWN_TOOL] there is no tool 'build_project'" in final


def test_an_undeclared_tool_without_a_built_in_is_unknown_to_the_model(durable):
    doc = agent_doc([calls(("a", "ghost")), {"text": "saw {{result:a}}"}], [])
    report = anyio.run(durable(doc).run, "go")
    assert report.status == "completed"
    assert report.session.final_answer == "saw [error UNKNOWN_TOOL] there is no tool 'ghost'"


def test_tool_form_and_match_form_rules_work_side_by_side(durable):
    defer = {"tag": "defer", "reason": "later"}
    policy = {"default": {"tag": "runSync"}, "rules": [
        {"tool": "remote_a", "disposition": defer},
        {"match": {"tool": "remote_b"}, "disposition": {**defer, "reason": "much later"}},
    ]}  # fmt: skip
    doc = agent_doc([calls(("a", "remote_a"), ("b", "remote_b"), ("e", "echo")), FINAL],
                    [], policy)  # fmt: skip
    report = anyio.run(durable(doc).run, "go")
    calls_ = report.session.calls
    assert (calls_["a"].defer_reason, calls_["b"].defer_reason) == ("later", "much later")
    assert calls_["e"].state == "completed"
    both = {"tool": "x", "match": {"tool": "x"}, "disposition": defer}
    with pytest.raises(AgentError, match=r"give the tool as `tool` or as `match\.tool`"):
        parse_agent(agent_doc([], [], {"rules": [both]}))


def test_local_process_path_runs_an_undeclared_isolated_tool_with_external_effects(
    durable, store, tmp_path
):
    script = tmp_path / "worker.sh"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {PYTHON_WORKER}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    isolated = {"tag": "runIsolated", "spec": {"tag": "localProcess", "path": str(script)}}
    doc = agent_doc([calls(("a", "echo"), text="from the worker"), {"text": "{{result:a}}"}],
                    [], {"rules": [{"tool": "echo", "disposition": isolated}]})  # fmt: skip
    report = anyio.run(durable(doc).run, "go")
    assert report.session.final_answer == "from the worker"
    effect = store.effect(report.session.calls["a"].idempotency_key)
    assert effect is not None and (effect.effects, effect.state) == ("external", "completed")
    spec = {"tag": "localProcess", "path": str(script), "argv": ["x"]}
    with pytest.raises(AgentError, match="exactly one of `argv` or `path`"):
        parse_agent(agent_doc([], [], {"default": {"tag": "runIsolated", "spec": spec}}))


# --- cache keys ---------------------------------------------------------------------------


def test_calls_naming_one_cache_key_share_one_entry(durable, store, registry):
    first, second = Counter(registry, "test_first"), Counter(registry, "test_second")
    third = Counter(registry, "test_third")
    shared = {"tag": "cache", "key": "nightly-report"}
    agents_exe_key = {"tag": "cache", "key": {"toolName": "report", "argumentsHash": "h1"}}
    policy = {
        "default": {"tag": "runSync"},
        "rules": [{"tool": "test_third",
                   "disposition": {"tag": "decorate", "decorators": [agents_exe_key],
                                   "inner": {"tag": "runSync"}}}],
        "wrappers": [{"match": {"tool": "test_f*"}, "decorators": [shared]},
                     {"match": {"tool": "test_s*"}, "decorators": [shared]}],
    }  # fmt: skip
    script = [
        {"tool_calls": [{"id": "a", "name": "test_first", "arguments": {"day": 1}},
                        {"id": "b", "name": "test_second", "arguments": {"other": True}},
                        {"id": "c", "name": "test_third", "arguments": {"day": 1}}]},
        {"text": "a={{result:a}} b={{result:b}} c={{result:c}}"},
    ]  # fmt: skip
    report = anyio.run(durable(agent_doc(script, [], policy), cache=store).run, "go")
    # b names a's key: a's result, b never ran; c's agents-exe key is an entry of its own.
    assert report.session.final_answer == "a=test_first #1 b=test_first #1 c=test_third #1"
    assert (first.count, second.count, third.count) == (1, 0, 1)
    again = anyio.run(durable(agent_doc(script, [], policy), cache=store).run, "go")
    assert again.session.final_answer == report.session.final_answer
    assert (first.count, second.count, third.count) == (1, 0, 1)


def test_an_env_provider_closes_only_what_it_opened(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    llm = EnvironmentLLM(EnvironmentProvider(model="m"))
    anyio.run(llm.aclose)  # nothing made yet: nothing to close
    with pytest.raises(LLMError, match="closed"):
        anyio.run(llm.complete, LLMRequest("", (Message("user", "hi"),)))
