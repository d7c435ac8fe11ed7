"""Classification: exact-name rules, the default, `*` wrappers, and callables."""

from __future__ import annotations

import anyio

from runner.llm.base import RequestedCall
from runner.session import Defer, PolicyConfig, PolicyContext, RunSync
from runner.session.policy import glob_matches
from tests.session.conftest import FINAL, agent_doc, calls

CONTEXT = PolicyContext("s", "test", 0)
CONFIG = PolicyConfig.model_validate({
    "default": {"tag": "runAsync"},
    "rules": [
        {"match": {"tool": "fetch"}, "disposition": {"tag": "defer", "reason": "later"}},
        {"match": {"tool": "sh"}, "disposition": {"tag": "runIsolated",
         "spec": {"tag": "localProcess", "argv": ["w"]}}},
    ],
    "wrappers": [
        {"match": {"tool": "fetch*"}, "decorators": [{"tag": "label", "label": "net"}]},
        {"match": {"tool": "*"}, "decorators": [{"tag": "timeout", "seconds": 5}]},
    ],
})  # fmt: skip


def classify(name: str) -> dict:
    return CONFIG(CONTEXT, RequestedCall("c", name, {})).model_dump(by_alias=True)


def test_rules_match_the_exact_name_and_wrappers_add_decorators_in_order():
    fetch = classify("fetch")
    assert fetch["tag"] == "decorate"
    assert [d["tag"] for d in fetch["decorators"]] == ["label", "timeout"]
    assert fetch["inner"] == {"tag": "defer", "reason": "later", "expiresAfterSeconds": None}
    # "fetch_more" matches no rule (exact names only), but the `fetch*` wrapper.
    other = classify("fetch_more")
    assert other["inner"] == {"tag": "runAsync"}
    assert [d["tag"] for d in other["decorators"]] == ["label", "timeout"]
    assert classify("sh")["inner"]["spec"]["argv"] == ["w"]
    assert [d["tag"] for d in classify("zzz")["decorators"]] == ["timeout"]


def test_without_wrappers_the_default_is_returned_as_is():
    assert PolicyConfig()(CONTEXT, RequestedCall("c", "x", {})) == RunSync()


def test_globs_only_know_star():
    assert glob_matches("fetch_*", "fetch_a") and glob_matches("*", "")
    assert not glob_matches("fetch_?", "fetch_a") and not glob_matches("a.b", "axb")


def test_a_python_callable_is_a_policy(durable, store):
    seen = []

    def policy(context: PolicyContext, call: RequestedCall):
        seen.append((context.session_id, context.turn, call.name))
        return Defer(reason="mine") if call.arguments.get("slow") else RunSync()

    doc = agent_doc([calls(("a", "echo"), slow=True), FINAL], ["echo"])
    agent = durable(doc, policy=policy)
    report = anyio.run(agent.run, "go")
    assert report.status == "waiting"
    assert report.session.calls["a"].defer_reason == "mine"
    assert seen == [(report.session.id, 1, "echo")]
