"""The claim protocol over a real uvicorn: claim, heartbeat, complete and fail; races
between HTTP workers; long polls; fencing after a lapse; and every auth rule."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from runner.session.commands import freeze
from tests.server.conftest import Served, agents_dir
from tests.server.processes import start_serve, wait_for
from tests.server.test_flow import start

#: A second agent in the served directory: `lookup` has no effects, so a lapsed claim
#: makes its call claimable again (the seed's tools are undeclared: external).
LOOKUP_AGENT = {
    "slug": "lookup",
    "provider": {"tag": "scripted", "responses": [
        {"text": "looking", "tool_calls": [
            {"id": "c1", "name": "fetch_remote_a", "arguments": {"q": 1}}]},
        {"text": "found {{result:c1}}"}]},
    "executionMode": "asynchronous",
    "tools": [{"name": "fetch_remote_a", "kind": "external", "effects": "none"}],
    "toolCallPolicyConfig": {"default": {"tag": "defer", "reason": "a worker"}},
}  # fmt: skip


def claim(http: httpx.Client, tools: list[str], **options: Any) -> list[dict[str, Any]]:
    answer = http.post("/v1/claims", json={"tools": tools, **options})
    assert answer.status_code == 200, answer.text
    claims: list[dict[str, Any]] = answer.json()["claims"]
    return claims


def problem(answer: httpx.Response, status: int, kind: str) -> str:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"] == f"urn:agents-runner:problem:{kind}"
    detail: str = answer.json()["detail"]
    return detail


def lookup_session(served: Served, tmp_path: Path) -> str:
    agent = tmp_path / "agents" / "lookup.json"
    if not agent.exists():
        agent.write_text(json.dumps(LOOKUP_AGENT))
    with served.client() as http:
        made = http.post("/v1/sessions", json={"agent": "lookup.json", "prompt": "go",
                                               "run": True})  # fmt: skip
    assert made.status_code == 201 and made.json()["state"] == "waiting", made.text
    session_id: str = made.json()["session_id"]
    return session_id


def lapse(served: Served, entry: dict[str, Any]) -> None:
    while served.store.now_ms() <= entry["lease_expires_ms"]:
        time.sleep(0.02)


def test_claim_complete_and_the_session_advances(served: Served) -> None:
    session_id, tokens = start(served)
    with served.client("worker-a") as worker, served.client() as operator:
        [entry] = claim(worker, ["fetch_remote_a"], lease_seconds=30)
        assert entry["session_id"] == session_id and entry["tool_call_id"] == "call_remote_a"
        assert entry["continuation_token"] == tokens["fetch_remote_a"]
        assert entry["tool"] == "fetch_remote_a"
        assert entry["arguments"] == {"query": "orders today"}
        assert entry["idempotency_key"] == f"{session_id}/call_remote_a"
        assert entry["lease_seconds"] == 30 and entry["lease_expires_ms"] > 0
        assert claim(worker, ["fetch_remote_a"]) == []  # held: not handed out twice
        beat = worker.post(f"/v1/claims/{entry['claim']}/heartbeat", json={"lease_seconds": 90})
        assert beat.status_code == 200, beat.text
        assert beat.json()["state"] == "held" and beat.json()["lease_seconds"] == 90
        assert beat.json()["lease_expires_ms"] > entry["lease_expires_ms"]
        reply = {"result": {"type": "json", "content": {"orders": 12}}}
        done = worker.post(f"/v1/claims/{entry['claim']}/complete", json=reply)
        assert done.status_code == 200, done.text
        assert done.json() == {"status": "applied", "session_id": session_id,
                               "session_status": "waiting"}  # fmt: skip
        again = worker.post(f"/v1/claims/{entry['claim']}/complete", json=reply)
        assert again.json()["status"] == "already_completed"
        other = worker.post(f"/v1/claims/{entry['claim']}/complete", json={"result": "x"})
        problem(other, 409, "token_already_completed")
        problem(worker.post(f"/v1/claims/{entry['claim']}/heartbeat"), 409, "claim_done")
        [b] = claim(operator, ["fetch_remote_b"])
        final = operator.post(f"/v1/claims/{b['claim']}/complete",
                              json={"result": "3 open tickets", "resume": True})  # fmt: skip
        assert final.status_code == 200, final.text
        assert final.json()["resumed"]["status"] == "completed"
        assert "3 open tickets" in final.json()["resumed"]["final_answer"]


def test_fail_gives_the_call_an_error(served: Served) -> None:
    session_id, _ = start(served)
    with served.client("worker-b") as worker:
        [entry] = claim(worker, ["fetch_remote_b"])
        blank = worker.post(f"/v1/claims/{entry['claim']}/fail", json={"reason": "  "})
        assert "body.reason" in problem(blank, 422, "invalid_field")
        failed = worker.post(f"/v1/claims/{entry['claim']}/fail", json={"reason": "remote down"})
        assert failed.status_code == 200 and failed.json()["status"] == "applied"
    call = served.store.load(session_id).calls["call_remote_b"]
    assert call.state == "failed" and call.result is not None
    assert call.result.content == "remote down"


def test_two_http_workers_racing_for_one_call(served: Served) -> None:
    def worker(barrier: threading.Barrier, won: list[list[dict[str, Any]]], n: int) -> None:
        with served.client("worker-a") as http:
            barrier.wait()
            won[n] = claim(http, ["fetch_remote_a"], max=5)

    for _ in range(4):
        session_id, _ = start(served)
        barrier, won = threading.Barrier(2), [[], []]
        threads = [threading.Thread(target=worker, args=(barrier, won, n)) for n in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(len(w) for w in won) == [0, 1], won
        assert (won[0] + won[1])[0]["session_id"] == session_id


def test_a_long_poll_returns_when_a_call_becomes_deferred(served: Served) -> None:
    answers: list[httpx.Response] = []

    def poll() -> None:
        with served.client("worker-b") as http:
            answers.append(http.post("/v1/claims", json={"tools": ["fetch_remote_b"],
                                                         "wait_seconds": 25}))  # fmt: skip

    poller = threading.Thread(target=poll)
    poller.start()
    session_id, _ = start(served)  # POST /v1/sessions with run: true
    poller.join()
    [answer] = answers
    assert answer.status_code == 200, answer.text
    [entry] = answer.json()["claims"]
    assert (entry["session_id"], entry["tool"]) == (session_id, "fetch_remote_b")


def test_a_long_poll_with_nothing_to_claim_answers_empty(served: Served) -> None:
    with served.client("worker-a") as http:
        assert claim(http, ["fetch_remote_a"], wait_seconds=0.3) == []


def test_a_lapsed_and_reclaimed_claim_is_refused_and_changes_nothing(
    served: Served, tmp_path: Path
) -> None:
    session_id = lookup_session(served, tmp_path)
    with served.client("worker-a") as first, served.client("operator") as second:
        [old] = claim(first, ["fetch_remote_a"], lease_seconds=1)
        lapse(served, old)
        [new] = claim(second, ["fetch_remote_a"])  # the request sweeps, then re-claims
        assert new["claim"] != old["claim"]
        assert new["continuation_token"] == old["continuation_token"]
        before = served.store.load(session_id)
        for action, body in (("complete", {"result": "stale"}), ("fail", {"reason": "stale"}),
                             ("heartbeat", {})):  # fmt: skip
            refused = first.post(f"/v1/claims/{old['claim']}/{action}", json=body)
            assert "claimed again" in problem(refused, 409, "claim_superseded")
        after = served.store.load(session_id)
        assert after.version == before.version and after.calls["c1"].state == "deferred"
        done = second.post(f"/v1/claims/{new['claim']}/complete", json={"result": "fresh"})
        assert done.status_code == 200 and done.json()["status"] == "applied"
    assert served.store.load(session_id).calls["c1"].result.content == "fresh"  # type: ignore[union-attr]


def test_a_lapsed_claim_of_an_external_tool_goes_to_unknown_outcome(served: Served) -> None:
    session_id, _ = start(served)
    with served.client("worker-a") as worker:
        [entry] = claim(worker, ["fetch_remote_a"], lease_seconds=1)
        lapse(served, entry)
        assert claim(worker, ["fetch_remote_a"]) == []  # swept: not handed out again
        assert served.store.load(session_id).calls["call_remote_a"].state == "unknown_outcome"
        beat = worker.post(f"/v1/claims/{entry['claim']}/heartbeat")
        assert "post it to /complete" in problem(beat, 409, "claim_lapsed")
        settled = worker.post(f"/v1/claims/{entry['claim']}/complete", json={"result": "late"})
        assert settled.status_code == 200 and settled.json()["status"] == "applied"
    assert served.store.load(session_id).calls["call_remote_a"].state == "completed"


def test_a_heartbeat_for_a_call_that_ended_says_so(served: Served) -> None:
    session_id, _ = start(served)
    with served.client("worker-a") as worker, served.client() as operator:
        [entry] = claim(worker, ["fetch_remote_a"])
        assert operator.post(f"/v1/sessions/{session_id}/cancel").status_code == 200
        beat = worker.post(f"/v1/claims/{entry['claim']}/heartbeat")
        assert "cancelled" in problem(beat, 409, "call_ended")


def test_frozen_sessions_are_not_handed_out(served: Served) -> None:
    session_id, _ = start(served)
    freeze(served.store, session_id)
    with served.client() as operator:
        assert claim(operator, ["fetch_remote_a", "fetch_remote_b"]) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [({"tools": []}, "body.tools"), ({"tools": ["a"], "lease_seconds": 0}, "body.lease_seconds"),
     ({"tools": ["a"], "lease_seconds": 3601}, "body.lease_seconds"),
     ({"tools": ["a"], "max": 0}, "body.max"), ({"tools": ["a"], "max": 101}, "body.max"),
     ({"tools": ["a"], "wait_seconds": 61}, "body.wait_seconds"),
     ({"tools": ["a"], "extra": 1}, "body.extra"), ({"tools": [""]}, "body.tools[0]"),
     ({}, "body.tools")],
)  # fmt: skip
def test_bad_claim_requests_name_the_field(served: Served, body: dict[str, Any],
                                           field: str) -> None:  # fmt: skip
    with served.client() as http:
        detail = problem(http.post("/v1/claims", json=body), 422, "invalid_field")
    assert detail.startswith(field), detail


def test_bad_heartbeats_and_results_name_the_field(served: Served) -> None:
    start(served)
    with served.client() as http:
        [entry] = claim(http, ["fetch_remote_a"])
        base = f"/v1/claims/{entry['claim']}"
        short = http.post(f"{base}/heartbeat", json={"lease_seconds": 0.5})
        assert problem(short, 422, "invalid_field").startswith("body.lease_seconds")
        bad = {"kind": "ToolCallResult", "version": "1.0"}
        assert "body.result" in problem(http.post(f"{base}/complete", json={"result": bad}),
                                        422, "invalid")  # fmt: skip
        # A refused result left the claim held.
        assert http.post(f"{base}/heartbeat").status_code == 200
        unknown = http.post("/v1/claims/not-a-claim/complete", json={"result": "x"})
        problem(unknown, 409, "claim_superseded")


def test_every_auth_rule_of_the_claim_endpoints(served: Served) -> None:
    start(served)
    with served.client("operator") as operator:
        [a] = claim(operator, ["fetch_remote_a"], lease_seconds=30)
    paths = ["/v1/claims", f"/v1/claims/{a['claim']}/heartbeat",
             f"/v1/claims/{a['claim']}/complete", f"/v1/claims/{a['claim']}/fail"]  # fmt: skip
    bodies = [{"tools": ["fetch_remote_a"]}, {}, {"result": "x"}, {"reason": "x"}]
    with served.client(None) as anonymous, served.client("viewer") as viewer:
        for path, body in zip(paths, bodies, strict=True):
            problem(anonymous.post(path, json=body), 401, "unauthorized")
            bad = anonymous.post(path, json=body, headers={"Authorization": "Bearer wrong"})
            problem(bad, 401, "unauthorized")
            problem(viewer.post(path, json=body), 403, "forbidden")
    with served.client("worker-b") as other:
        refused = other.post("/v1/claims", json={"tools": ["fetch_remote_b", "fetch_remote_a"]})
        assert "fetch_remote_a" in problem(refused, 403, "forbidden")
        assert "fetch_remote_b" not in refused.json()["detail"]
        for path, body in zip(paths[1:], bodies[1:], strict=True):
            problem(other.post(path, json=body), 403, "forbidden")  # not its tool
    with served.client("worker-a") as granted:
        assert granted.post(paths[1], json={}).status_code == 200  # an operator's claim
        assert granted.post(paths[2], json={"result": "x"}).status_code == 200


def test_serve_sweeps_lapsed_claims_by_itself(tmp_path: Path) -> None:
    serve = start_serve(str(tmp_path / "s.db"), tmp_path, "--no-auth", "--agents",
                        str(agents_dir(tmp_path)))  # fmt: skip
    try:
        with serve.client() as http:
            made = http.post("/v1/sessions", json={"agent": "my-agent.scripted.json",
                                                   "prompt": "go", "run": True})  # fmt: skip
            assert made.status_code == 201, made.text
            session_id = made.json()["session_id"]
            [entry] = claim(http, ["fetch_remote_a"], lease_seconds=1)
            assert entry["session_id"] == session_id

            def state() -> str:
                shown = http.get(f"/v1/sessions/{session_id}").json()
                found: str = shown["calls"]["call_remote_a"]["state"]
                return found

            # No claim request comes: serve's own sweep moves the call.
            wait_for(lambda: state() == "unknown_outcome", what="the sweep in serve")
    finally:
        assert serve.stop() == 0, serve.stderr()
