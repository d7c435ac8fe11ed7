"""Synchronous agents never yield ("only asynchronous agents yield partial turns"): every
call of a turn ends within it, so `run` and `resume` reach the final answer or an error,
never `waiting`. Real SQLite stores, the scripted provider, a real local worker."""

from __future__ import annotations

import sys

import anyio

from runner.session.policy import RunIsolated, RunSync, from_json, unwrap
from tests.conftest import REPO
from tests.session.conftest import Counter, agent_doc, calls

PYTHON_WORKER = REPO / "examples" / "workers" / "python" / "worker.py"
DEFER = {"tag": "defer", "reason": "an external system"}


def synchronous(responses: list[dict], policy: dict, tools: list[str] | None = None) -> dict:
    return agent_doc(responses, tools or [], policy, executionMode="synchronous")


def test_a_deferred_call_with_a_built_in_runs_it_and_keeps_its_decorators(durable, registry):
    counted = Counter(registry, "test_lookup")
    policy = {"default": {"tag": "runSync"}, "rules": [{"tool": "test_lookup",
              "disposition": {"tag": "decorate", "inner": DEFER,
                              "decorators": [{"tag": "label", "label": "lookup"}]}}]}  # fmt: skip
    doc = synchronous([calls(("a", "test_lookup")), {"text": "got {{result:a}}"}], policy)
    report = anyio.run(durable(doc).run, "go")
    assert report.status == "completed" and report.session.final_answer == "got test_lookup #1"
    call = report.session.calls["a"]
    assert counted.count == 1 and call.label == "lookup" and call.defer_reason is None
    decorators, base = unwrap(from_json(call.disposition))
    assert isinstance(base, RunSync) and [d.tag for d in decorators] == ["label"]
    # The same file in asynchronous mode defers it: the difference is the mode alone.
    waiting = anyio.run(durable({**doc, "executionMode": "asynchronous"}).run, "go")
    assert waiting.status == "waiting" and counted.count == 1


def test_a_deferred_call_without_a_built_in_fails_saying_deferral_needs_asynchronous_mode(
    durable,
):
    policy = {"default": {"tag": "runSync"}, "rules": [{"tool": "remote", "disposition": DEFER}]}
    # Declared or not, external or builtin-without-a-function: nothing can run it here.
    doc = synchronous([calls(("a", "remote"), ("b", "echo")),
                       {"text": "a={{result:a}} b={{result:b}}"}], policy)  # fmt: skip
    doc["tools"] = [{"name": "remote", "kind": "external"}]
    report = anyio.run(durable(doc).run, "go")
    assert report.status == "completed"
    call = report.session.calls["a"]
    assert call.state == "failed" and call.result.error_code == "UNAVAILABLE"
    assert 'deferral needs asynchronous mode (executionMode "asynchronous")' in call.result.content
    assert report.session.final_answer.startswith("a=[error UNAVAILABLE] the policy defers")
    assert report.session.final_answer.endswith("b={}")


def test_a_detached_isolated_call_runs_attached_in_its_turn(durable, store):
    detached = {"tag": "runIsolated", "attached": False, "spec": {"tag": "localProcess",
                "argv": [sys.executable, str(PYTHON_WORKER)]}}  # fmt: skip
    doc = synchronous([calls(("a", "echo"), text="from the worker"), {"text": "{{result:a}}"}],
                      {"default": detached})  # fmt: skip
    agent = durable(doc)
    session = agent.start("go")
    report = anyio.run(agent.resume, session.id)
    assert report.status == "completed" and report.session.final_answer == "from the worker"
    _, base = unwrap(from_json(report.session.calls["a"].disposition))
    assert isinstance(base, RunIsolated) and base.attached
    effect = store.effect(report.session.calls["a"].idempotency_key)
    assert effect is not None and effect.state == "completed"


async def slow(arguments: dict) -> str:
    await anyio.sleep(0.2)  # long enough for the fast call to end first
    return "slow done"


async def forever(arguments: dict) -> str:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


def test_run_async_calls_are_awaited_whatever_the_yield_strategy(durable, registry):
    registry.add("test_slow", slow)
    registry.add("test_forever", forever)
    Counter(registry, "test_fast")
    policy = {"default": {"tag": "runAsync"}}
    script = [calls(("s", "test_slow"), ("f", "test_fast")), {"text": "{{result:s}}"}]
    for strategy in ("yieldOnAnyProgress", {"tag": "yieldOnTimeout", "milliseconds": 1}):
        doc = synchronous(script, policy)
        doc["asyncYieldStrategy"] = strategy
        agent = durable(doc)
        session = agent.start("go")
        anyio.run(agent.step, session.id)  # the LLM turn
        ran = anyio.run(agent.step, session.id)  # one step runs both calls to their end
        assert set(ran.ran) == {"s", "f"}, strategy
        assert anyio.run(agent.resume, session.id).session.final_answer == "slow done"
    # Asynchronous, the step yields once the fast call ends, the other still ready.
    script = [calls(("s", "test_forever"), ("f", "test_fast")), {"text": "{{result:f}}"}]
    agent = durable(agent_doc(script, [], policy, asyncYieldStrategy="yieldOnAnyProgress"))
    session = agent.start("go")
    anyio.run(agent.step, session.id)
    step = anyio.run(agent.step, session.id)
    assert step.ran == ("f",) and step.session.calls["s"].state == "ready"
