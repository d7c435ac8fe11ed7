"""Decorators around a call: timeout, retries with backoff, cache, truncate, and nesting."""

from __future__ import annotations

import time

import anyio

from runner.state import ManualClock
from tests.session.conftest import FINAL, Counter, agent_doc, calls


def run_one(durable, tool: str, decorators: list, inner: dict | None = None, store=None,
            clock=None, **arguments):  # fmt: skip
    disposition = {"tag": "decorate", "decorators": decorators,
                   "inner": inner or {"tag": "runSync"}}  # fmt: skip
    doc = agent_doc([calls(("a", tool), **arguments), FINAL], [tool],
                    {"default": disposition})  # fmt: skip
    agent = durable(doc, cache=store, **({"clock": clock} if clock else {}))
    report = anyio.run(agent.run, "go")
    return report.session.calls["a"]


async def sleep_tool(arguments: dict) -> str:
    await anyio.sleep(arguments.get("seconds", 0))
    return "woke"


def test_timeout_fails_the_call_with_a_retryable_deadline(durable, registry):
    registry.add("test_sleep", sleep_tool)
    started = time.monotonic()
    call = run_one(durable, "test_sleep", [{"tag": "timeout", "seconds": 0.2}], seconds=30)
    assert call.state == "failed"
    assert call.result.error_code == "DEADLINE_EXCEEDED" and call.result.retryable
    assert time.monotonic() - started < 20  # bound only to catch a hang


def test_retries_with_backoff_until_success(durable, registry):
    flaky = Counter(registry, "test_flaky", failures=2)
    clock = ManualClock()
    call = run_one(durable, "test_flaky", [{"tag": "retries", "count": 3, "backoffMs": 100}],
                   clock=clock)  # fmt: skip
    assert call.state == "completed" and call.result.content == "test_flaky #3"
    assert flaky.count == 3 and call.attempts == 3
    # Two waits, exponential with jitter in [0.5, 1.5): 100 ms, then 200 ms, each jittered.
    first, second = clock.slept
    assert 0.05 <= first < 0.15 and 0.1 <= second < 0.3


def test_retries_stop_at_the_budget_and_keep_the_last_error(durable, registry):
    flaky = Counter(registry, "test_always", failures=99)
    call = run_one(durable, "test_always", [{"tag": "retries", "count": 2, "backoffMs": 1}])
    assert call.state == "failed" and call.result.content == "failure 3"
    assert flaky.count == 3


def test_non_retryable_errors_and_bad_arguments_are_never_retried(durable, registry):
    fatal = Counter(registry, "test_fatal", failures=99, retryable=False)
    call = run_one(durable, "test_fatal", [{"tag": "retries", "count": 5, "backoffMs": 1}])
    assert call.state == "failed" and fatal.count == 1
    picky = Counter(registry, "test_picky")
    doc = agent_doc([calls(("a", "test_picky"), n="x"), FINAL], [])
    doc["tools"] = [{"name": "test_picky", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer"}}}}]  # fmt: skip
    doc["toolCallPolicyConfig"] = {"default": {"tag": "decorate", "inner": {"tag": "runSync"},
                                   "decorators": [{"tag": "retries", "count": 5}]}}  # fmt: skip
    report = anyio.run(durable(doc).run, "go")
    call = report.session.calls["a"]
    assert (
        call.result.error_code == "INVALID_ARGUMENTS"
        and "n: 'x' is not of type" in call.result.content
    )
    assert picky.count == 0 and call.attempts == 1


def test_a_cache_hit_skips_the_call(durable, store, registry):
    counted = Counter(registry, "test_cached")
    first = run_one(durable, "test_cached", [{"tag": "cache"}], store=store, q=1)
    second = run_one(durable, "test_cached", [{"tag": "cache"}], store=store, q=1)
    other = run_one(durable, "test_cached", [{"tag": "cache"}], store=store, q=2)
    assert first.result.content == second.result.content == "test_cached #1"
    assert other.result.content == "test_cached #2"
    assert counted.count == 2 and second.attempts == 0


def test_truncate_cuts_ok_results_to_max_bytes(durable, registry):
    registry.register("test_long")(lambda arguments: "é" * 100)
    call = run_one(durable, "test_long", [{"tag": "truncate", "maxBytes": 11}])
    assert call.result.content.startswith("ééééé\n[truncated: 11 of 200 bytes]")


def test_nesting_order_timeout_inside_retries_bounds_each_attempt(durable, registry):
    # retries(timeout(call)): every attempt gets its own 0.2 s, so three attempts run.
    slow = Counter(registry, "test_slow_inner")
    registry.add("test_slow_inner", _slow_counter(slow), replace=True)
    call = run_one(durable, "test_slow_inner",
                   [{"tag": "retries", "count": 2, "backoffMs": 1},
                    {"tag": "timeout", "seconds": 0.2}])  # fmt: skip
    assert call.result.error_code == "DEADLINE_EXCEEDED" and slow.count == 3
    # timeout(retries(call)): one 0.2 s budget for everything, so one attempt runs.
    slow.count = 0
    call = run_one(durable, "test_slow_inner",
                   [{"tag": "timeout", "seconds": 0.2},
                    {"tag": "retries", "count": 2, "backoffMs": 1}])  # fmt: skip
    assert call.result.error_code == "DEADLINE_EXCEEDED" and slow.count == 1


def test_nesting_order_cache_outside_truncate_stores_the_cut_result(durable, store, registry):
    registry.register("test_big")(lambda arguments: "x" * 50)
    cut_then_cached = [{"tag": "cache"}, {"tag": "truncate", "maxBytes": 10}]
    run_one(durable, "test_big", cut_then_cached, store=store, k=1)
    assert store.get("test_big", {"k": 1}).content.startswith("x" * 10 + "\n[truncated")
    cached_then_cut = [{"tag": "truncate", "maxBytes": 10}, {"tag": "cache"}]
    call = run_one(durable, "test_big", cached_then_cut, store=store, k=2)
    assert store.get("test_big", {"k": 2}).content == "x" * 50
    assert call.result.content.startswith("x" * 10 + "\n[truncated")


def _slow_counter(counter: Counter):
    async def slow(arguments: dict) -> str:
        counter.count += 1
        await anyio.sleep(30)
        return "never"

    return slow
