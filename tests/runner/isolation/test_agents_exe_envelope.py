"""Workers written for agents-exe, run unchanged by LocalProcessRunner(envelope="agents-exe"):
the example worker's answers, and each misbehaviour as the typed outcome a v1 worker's
would get, with the same protections (deadline, caps). Then a whole session: an agent
whose policy runs a tool in the example worker reaches its final answer."""

from __future__ import annotations

import json
import uuid

import anyio
import pytest

from runner.isolation import LocalProcessRunner, UnsupportedExchange
from runner.session import parse_agent, with_durable_workflows
from runner.stores import SQLiteStore
from tests.conftest import REPO, WORKERS, make_request

pytestmark = pytest.mark.anyio

EXAMPLE = REPO / "examples" / "workers" / "agents-exe" / "worker.sh"
MODES = WORKERS / "agents_exe_modes.sh"
#: Only catches a hang: every call here ends long before, by its deadline or on its own.
HANG_S = 60


def request(tool: str = "echo", arguments: dict | None = None, seconds: float = 30.0):
    return make_request(tool, arguments, seconds=seconds, request_id=str(uuid.uuid4()))


def modes(mode: str) -> LocalProcessRunner:
    return LocalProcessRunner(["/bin/bash", str(MODES), mode], envelope="agents-exe")


async def test_the_example_answers_in_its_envelope_and_the_result_is_v1() -> None:
    runner = LocalProcessRunner([str(EXAMPLE)], envelope="agents-exe")  # its path alone
    echoed = await runner.call(request("echo", {"text": "hello from worker"}))
    assert echoed.ok and echoed.result.output.to_wire() == {
        "type": "text",
        "content": "hello from worker",
    }
    assert echoed.exit_code == 0 and echoed.runner_info["envelope"] == "agents-exe"
    added = await runner.call(request("add", {"a": 2, "b": 40}))
    assert added.ok and added.result.output.to_wire() == {"type": "json", "content": {"sum": 42}}


async def test_an_error_status_is_a_tool_failure_the_model_sees() -> None:
    runner = LocalProcessRunner([str(EXAMPLE)], envelope="agents-exe")
    outcome = await runner.call(request("rm_rf", {}))
    assert outcome.exit_code == 0 and outcome.error_code == "TOOL_FAILED"
    assert 'unknown tool "rm_rf"' in outcome.result.error.message
    assert outcome.result.error.retryable is False


async def test_the_worker_reads_exactly_agents_exe_request() -> None:
    call = request("echo", {"text": "hi"})
    outcome = await modes("envelope").call(call)
    seen = outcome.result.output.content
    assert set(seen) == {"token", "toolCall", "contextSnapshot", "policy"}  # no version
    assert seen["token"] == call.id
    assert seen["toolCall"]["function"] == {"name": "echo", "arguments": '{"text":"hi"}'}
    assert seen["policy"] == {"tag": "runIsolated",
                              "spec": {"tag": "localProcess", "path": "/bin/bash"}}  # fmt: skip


# (mode, code, deadline in seconds): each as a v1 worker's misbehaviour is typed.
MISBEHAVIOURS = [
    ("no_token", "MALFORMED_OUTPUT", 30),
    ("wrong_token", "MALFORMED_OUTPUT", 30),
    ("garbage", "MALFORMED_OUTPUT", 30),
    ("unknown_status", "MALFORMED_OUTPUT", 30),
    ("no_result", "MALFORMED_OUTPUT", 30),
    ("plain_result", "MALFORMED_OUTPUT", 30),
    ("extra_field", "MALFORMED_OUTPUT", 30),
    ("duplicate_keys", "MALFORMED_OUTPUT", 30),
    ("exit_1", "WORKER_CRASHED", 30),
    ("flood", "OUTPUT_TOO_LARGE", 30),
    ("hang", "WORKER_TIMEOUT", 1),
]


@pytest.mark.parametrize(("mode", "code", "deadline"), MISBEHAVIOURS)
async def test_a_misbehaving_worker_gets_a_typed_outcome(mode, code, deadline) -> None:
    with anyio.fail_after(HANG_S):
        outcome = await modes(mode).call(request(seconds=deadline))
    assert outcome.error_code == code, outcome.result.error
    assert outcome.result.id is not None and outcome.runner_info["envelope"] == "agents-exe"


async def test_the_messages_say_what_was_wrong() -> None:
    missing = await modes("no_token").call(request())
    assert "token: missing" in missing.result.error.message
    wrong = await modes("wrong_token").call(request())
    assert "token: expected the request's" in wrong.result.error.message
    crashed = await modes("exit_1").call(request())
    assert "exits 0 and reports errors in its envelope" in crashed.result.error.message


async def test_the_example_answers_v1_requests_only_through_its_dialect() -> None:
    # The same worker under the default v1 runner: it finds no token and exits 2.
    outcome = await LocalProcessRunner([str(EXAMPLE)]).call(request())
    assert outcome.error_code == "WORKER_CRASHED" and "no token" not in outcome.stderr_tail
    assert "not an isolation envelope" in outcome.stderr_tail


async def test_describe_is_refused_by_an_agents_exe_runner() -> None:
    with pytest.raises(UnsupportedExchange, match="no describe exchange"):
        await LocalProcessRunner([str(EXAMPLE)], envelope="agents-exe").describe()


def test_an_unknown_envelope_is_refused_when_the_runner_is_made() -> None:
    with pytest.raises(ValueError, match="unknown envelope 'agents'"):
        LocalProcessRunner([str(EXAMPLE)], envelope="agents")  # type: ignore[arg-type]


# --- a whole session --------------------------------------------------------------------


def test_an_agent_runs_a_tool_in_an_agents_exe_worker_to_its_final_answer(tmp_path) -> None:
    spec = {"tag": "localProcess", "path": str(EXAMPLE), "envelope": "agents-exe"}
    seeing = {"tag": "localProcess", "argv": ["/bin/bash", str(MODES), "envelope"],
              "envelope": "agents-exe"}  # fmt: skip
    document = {
        "slug": "agents-exe-worker",
        "executionMode": "asynchronous",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 40}},
                            {"id": "call_2", "name": "echo", "arguments": {"text": "hi"}},
                            {"id": "call_3", "name": "inspect", "arguments": {}}]},
            {"text": "sum: {{result:call_1}}, echo: {{result:call_2}}"}]},
        "tools": [{"name": n, "kind": "external"} for n in ("add", "echo", "inspect")],
        "toolCallPolicyConfig": {
            "default": {"tag": "runSync"},
            "rules": [{"tool": "add", "disposition": {"tag": "runIsolated", "spec": spec}},
                      {"tool": "echo", "disposition": {"tag": "runIsolated", "spec": spec}},
                      {"tool": "inspect", "disposition": {"tag": "runIsolated",
                                                          "spec": seeing}}],
        },
    }  # fmt: skip
    store = SQLiteStore(tmp_path / "s.db")
    try:
        report = anyio.run(with_durable_workflows(parse_agent(document), store).run, "add")
    finally:
        store.close()
    assert report.status == "completed"
    calls = report.session.calls
    assert calls["call_1"].state == "completed" and calls["call_1"].result.content == {"sum": 42}
    assert calls["call_2"].result.content == "hi"
    assert report.session.final_answer == f"sum: {json.dumps({'sum': 42})}, echo: hi"
    # What the session sent: the call's token, its LLM id, the spec in agents-exe's form,
    # the session's UUID and a turn id.
    seen = calls["call_3"].result.content
    assert seen["token"] == calls["call_3"].token
    assert seen["toolCall"] == {"id": "call_3", "type": "function",
                                "function": {"name": "inspect", "arguments": "{}"}}  # fmt: skip
    assert seen["policy"] == {"tag": "runIsolated",
                              "spec": {"tag": "localProcess", "path": "/bin/bash"}}  # fmt: skip
    snapshot = seen["contextSnapshot"]
    assert report.session.id == f"s-{snapshot['tecsSessionId']}"
    assert snapshot["tecsTurnId"] != "00000000-0000-0000-0000-000000000000"
