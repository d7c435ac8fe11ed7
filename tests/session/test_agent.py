"""Agent files: the example loads; mistakes are refused with their path in the file."""

from __future__ import annotations

import json

import pytest

from runner.session import AgentError, load_agent, parse_agent
from tests.conftest import REPO
from tests.session.conftest import agent_doc

DEMO = REPO / "examples" / "agents" / "demo.json"


def test_the_demo_agent_loads_with_its_script():
    agent = load_agent(DEMO)
    assert agent.slug == "demo" and agent.execution_mode == "asynchronous"
    assert len(agent.provider.responses) == 2
    assert {t.name for t in agent.tools} == {"fetch_local", "fetch_remote_a", "fetch_remote_b",
                                             "bash"}  # fmt: skip


def test_defaults():
    document = agent_doc([], [])
    del document["executionMode"]  # agent_doc's tests are asynchronous; the file default is not
    agent = parse_agent(document)
    assert agent.execution_mode == "synchronous"
    assert agent.max_concurrency == 4
    assert agent.async_yield_strategy == "yieldWhenAllDone"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": "blue"}, "colour: Extra inputs are not permitted"),
        ({"maxConcurrency": 0}, "maxConcurrency: Input should be greater than or equal to 1"),
        ({"executionMode": "later"}, "executionMode: Input should be 'synchronous'"),
        ({"asyncYieldStrategy": {"tag": "yieldOnTimeout"}}, "asyncYieldStrategy.milliseconds"),
        ({"toolCallPolicyConfig": {"default": {"tag": "runFast"}}},
         "toolCallPolicyConfig.default: Input tag 'runFast' found"),
        ({"toolCallPolicyConfig": {"rules": [{"match": {"tool": "x"},
          "disposition": {"tag": "runIsolated", "spec": {"tag": "docker"}}}]}},
         "toolCallPolicyConfig.rules[0].disposition.spec.image: Field required"),
        ({"toolCallPolicyConfig": {"wrappers": [{"match": {"tool": "x*"},
          "decorators": [{"tag": "retries", "count": -1}]}]}},
         "toolCallPolicyConfig.wrappers[0].decorators[0].count"),
        ({"tools": [{"name": "t"}, {"name": "t"}]}, "repeated: t"),
    ],
)  # fmt: skip
def test_bad_values_name_their_path(change, message):
    with pytest.raises(AgentError) as caught:
        parse_agent({**agent_doc([], []), **change}, "agent file a.json")
    assert message in str(caught.value)
    assert str(caught.value).startswith("agent file a.json: ")


def isolated(disposition: dict) -> dict:
    return {"toolCallPolicyConfig": {"rules": [{"tool": "bash", "disposition": disposition}]}}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (isolated({"tag": "runIsolated",
                   "spec": {"tag": "docker", "image": "x", "attached": False}}),
         "toolCallPolicyConfig.rules[0].disposition.spec.attached: Extra inputs are not"
         " permitted; `attached` belongs on toolCallPolicyConfig.rules[0].disposition"
         " (runIsolated), not here"),
        (isolated({"tag": "runIsolated", "image": "x", "spec": {"tag": "docker", "image": "x"}}),
         "`image` belongs on toolCallPolicyConfig.rules[0].disposition.spec (docker)"),
        ({"apiKeyEnv": "KEY"}, "`apiKeyEnv` belongs on provider"),
        ({"provider": {"tag": "scripted", "responses": [], "maxConcurrency": 2}},
         "provider.maxConcurrency: Extra inputs are not permitted; `maxConcurrency` belongs"
         " at the top level"),
    ],
)  # fmt: skip
def test_a_known_field_in_the_wrong_object_says_where_it_belongs(change, message):
    with pytest.raises(AgentError) as caught:
        parse_agent({**agent_doc([], []), **change}, "agent file a.json")
    assert message in str(caught.value)


def test_an_unknown_field_gets_no_guess():
    with pytest.raises(AgentError) as caught:
        parse_agent({**agent_doc([], []), "colour": "blue"})
    assert str(caught.value) == "agent: colour: Extra inputs are not permitted"


def test_missing_script_and_bad_json_are_clear(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"slug": "a", "provider": {"tag": "scripted", "script": "s.json"}}))
    with pytest.raises(AgentError, match=r"provider.script: cannot read .*s.json"):
        load_agent(path)
    path.write_text("{nope")
    with pytest.raises(AgentError, match="is not valid JSON"):
        load_agent(path)


def test_hash_follows_the_definition():
    one = parse_agent(agent_doc([{"text": "a"}], []))
    assert one.hash == parse_agent(agent_doc([{"text": "a"}], [])).hash
    assert one.hash != parse_agent(agent_doc([{"text": "b"}], [])).hash


def test_the_hash_is_computed_once_and_a_changed_copy_has_its_own(monkeypatch):
    agent = parse_agent(agent_doc([{"text": "a"}], []))
    first = agent.hash
    dumps = []
    monkeypatch.setattr(type(agent), "to_document", lambda self: dumps.append(1) or {})
    assert agent.hash == first and dumps == []  # not recomputed
    monkeypatch.undo()
    changed = agent.with_mode("synchronous")  # the test's agents are asynchronous
    assert changed.hash != first
    assert changed.with_mode("asynchronous").hash == first
    assert agent.model_copy().hash == first
