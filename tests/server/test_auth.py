"""Every access rule: 401 without a known token, 403 for the wrong role or tool."""

from __future__ import annotations

import pytest

from tests.server.conftest import Served
from tests.server.test_flow import start


def test_no_token_or_an_unknown_one_is_401(served: Served) -> None:
    with served.client(None) as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
            answer = http.get("/v1/sessions", headers=headers)
            assert answer.status_code == 401, headers
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.headers["www-authenticate"] == "Bearer"
            assert "secret" not in answer.text
        assert http.get("/healthz").status_code == 200  # the probes need no token


def test_viewer_reads_but_changes_nothing(served: Served) -> None:
    session_id, tokens = start(served)
    with served.client("viewer") as http:
        assert http.get("/v1/sessions").status_code == 200
        assert http.get(f"/v1/sessions/{session_id}").status_code == 200
        assert http.get(f"/v1/sessions/{session_id}/pending").status_code == 200
        refused = [
            http.post("/v1/sessions", json={"agent": "my-agent.scripted.json", "prompt": "x"}),
            http.post(f"/v1/continuations/{tokens['fetch_remote_a']}", json={"result": "x"}),
            http.post(f"/v1/continuations/{tokens['fetch_remote_a']}/fail", json={"reason": "x"}),
            http.post(f"/v1/sessions/{session_id}/resume"),
            http.post(f"/v1/sessions/{session_id}/cancel"),
        ]
    assert [r.status_code for r in refused] == [403] * 5
    assert served.store.load(session_id).status == "waiting"


def test_worker_completes_only_its_tools(served: Served) -> None:
    session_id, tokens = start(served)
    with served.client("worker-a") as http:
        pending = http.get(f"/v1/sessions/{session_id}/pending").json()["calls"]
        assert [c["tool"] for c in pending] == ["fetch_remote_a"]  # only what it may do
        other = http.post(f"/v1/continuations/{tokens['fetch_remote_b']}", json={"result": "x"})
        assert other.status_code == 403
        other = http.post(f"/v1/continuations/{tokens['fetch_remote_b']}/fail",
                          json={"reason": "x"})  # fmt: skip
        assert other.status_code == 403
        mine = http.post(f"/v1/continuations/{tokens['fetch_remote_a']}", json={"result": "x"})
        assert mine.status_code == 200 and mine.json()["status"] == "applied"
    with served.client("worker-b") as http:
        mine = http.post(f"/v1/continuations/{tokens['fetch_remote_b']}/fail",
                         json={"reason": "down"})  # fmt: skip
        assert mine.status_code == 200


@pytest.mark.parametrize("who", ["worker-a"])
def test_worker_may_not_read_or_operate(served: Served, who: str) -> None:
    session_id, _ = start(served)
    with served.client(who) as http:
        answers = [
            http.get("/v1/sessions"),
            http.get(f"/v1/sessions/{session_id}"),
            http.post("/v1/sessions", json={"agent": "my-agent.scripted.json", "prompt": "x"}),
            http.post(f"/v1/sessions/{session_id}/resume"),
            http.post(f"/v1/sessions/{session_id}/cancel"),
        ]
    assert [a.status_code for a in answers] == [403] * 5
