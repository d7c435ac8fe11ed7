"""The CLI's operator actions over HTTP: freeze, resume with retry / unquarantine, pause
(one step), retry of an unknown_outcome call with force; with the CLI's refusals."""

from __future__ import annotations

import pytest

from tests.server.conftest import Served
from tests.server.test_flow import start
from tests.server.test_problems import problem


def created(served: Served) -> str:
    """A session of the seed's agent that has not run yet."""
    with served.client() as http:
        made = http.post("/v1/sessions", json={"agent": "my-agent.scripted.json", "prompt": "go",
                                               "run": "none"})  # fmt: skip
    assert made.status_code == 201 and made.json()["state"] == "running"
    return str(made.json()["session_id"])


def test_freeze_stops_a_session_until_resume(served: Served) -> None:
    session_id = created(served)
    with served.client() as http:
        frozen = http.post(f"/v1/sessions/{session_id}/freeze")
        assert frozen.json() == {"session_id": session_id, "status": "frozen"}
        assert served.store.load(session_id).status == "frozen"
        resumed = http.post(f"/v1/sessions/{session_id}/resume")
        assert resumed.status_code == 200 and resumed.json()["status"] == "waiting"
        http.post(f"/v1/sessions/{session_id}/cancel")
        refused = problem(http.post(f"/v1/sessions/{session_id}/freeze"), 409)
        assert "cancelled; nothing to freeze" in str(refused["detail"])
        problem(http.post("/v1/sessions/nope/freeze"), 404)


def test_pause_runs_one_step_and_lists_the_tokens_it_waits_on(served: Served) -> None:
    session_id = created(served)
    with served.client() as http:
        steps = [http.post(f"/v1/sessions/{session_id}/pause") for _ in range(2)]
        pending = http.get(f"/v1/sessions/{session_id}/pending").json()["calls"]
    assert [s.status_code for s in steps] == [200, 200], steps[0].text
    first, paused = steps
    # One step each: the model's turn (its deferred calls made), then the local call run
    # and the turn yielded.
    assert first.json()["status"] == "running" and first.json()["ran"] == []
    assert paused.json()["status"] == "waiting"
    assert sorted(paused.json()["continuation_tokens"]) == sorted(
        c["continuation_token"] for c in pending
    )
    assert len(pending) == 2


def test_a_failed_session_resumes_only_with_retry(served: Served) -> None:
    session_id = created(served)
    session = served.store.load(session_id)
    session.status, session.failure_reason = "failed", "the model kept timing out"
    served.store.save(session)
    with served.client() as http:
        refused = problem(http.post(f"/v1/sessions/{session_id}/resume"), 409)
        assert "the model kept timing out" in str(refused["detail"])
        assert '{"retry": true}' in str(refused["detail"])
        retried = http.post(f"/v1/sessions/{session_id}/resume", json={"retry": True})
        assert retried.status_code == 200, retried.text
        assert retried.json()["status"] == "waiting"
        again = problem(http.post(f"/v1/sessions/{session_id}/resume", json={"retry": True}), 409)
        assert "is waiting, not failed" in str(again["detail"])
        wrong = problem(http.post(f"/v1/sessions/{session_id}/resume", json={"retyr": True}), 422)
        assert str(wrong["detail"]).startswith("body.retyr:")
    assert served.store.load(session_id).failure_reason is None


def test_a_quarantined_session_resumes_only_with_unquarantine(served: Served) -> None:
    session_id = created(served)
    session = served.store.load(session_id)
    session.status, session.quarantine_reason = "quarantined", "3 holders died"
    served.store.save(session)
    with served.client() as http:
        refused = problem(http.post(f"/v1/sessions/{session_id}/resume"), 409)
        assert "quarantined: 3 holders died" in str(refused["detail"])
        done = http.post(f"/v1/sessions/{session_id}/resume", json={"unquarantine": True})
    assert done.status_code == 200 and done.json()["status"] == "waiting"


def test_retry_runs_an_unknown_outcome_call_again_only_with_force(served: Served) -> None:
    session_id, tokens = start(served)
    token = tokens["fetch_remote_a"]
    with served.client() as http:
        deferred = problem(http.post(f"/v1/continuations/{token}/retry",
                                     json={"force": True}), 409)  # fmt: skip
        assert "is deferred; only a call in unknown_outcome" in str(deferred["detail"])
        session = served.store.load(session_id)
        session.calls["call_remote_a"].state = "unknown_outcome"
        served.store.save(session)
        unforced = problem(http.post(f"/v1/continuations/{token}/retry"), 409)
        assert '{"force": true}' in str(unforced["detail"])
        assert served.store.load(session_id).calls["call_remote_a"].state == "unknown_outcome"
        forced = http.post(f"/v1/continuations/{token}/retry", json={"force": True})
        assert forced.status_code == 200, forced.text
        assert forced.json()["retried"] == "call_remote_a"
        problem(http.post("/v1/continuations/nope/retry", json={"force": True}), 404)
    assert served.store.load(session_id).calls["call_remote_a"].state != "unknown_outcome"


@pytest.mark.parametrize("who", ["viewer", "worker-a"])
def test_the_actions_are_for_operators(served: Served, who: str) -> None:
    session_id, tokens = start(served)
    with served.client(who) as http:
        answers = [
            http.post(f"/v1/sessions/{session_id}/freeze"),
            http.post(f"/v1/sessions/{session_id}/pause"),
            http.post(f"/v1/sessions/{session_id}/resume", json={"retry": True}),
            http.post(f"/v1/continuations/{tokens['fetch_remote_a']}/retry", json={"force": True}),
        ]
    assert [a.status_code for a in answers] == [403] * 4
    assert served.store.load(session_id).status == "waiting"
