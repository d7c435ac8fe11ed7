"""agents-server's API (lucasdicioccio/agents-exe, docs/agents-server.md) as a client
written for it uses it, against our app on a real uvicorn on 127.0.0.1 with the seed's
scripted agent: agents by slug, `wait`/`timeout`, run modes, the session body (its
statuses, `version`, `pending`, `Location`), the listing and its pages, error bodies.
What we do differently is in docs/agents-server.md; each test names its row."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from tests.server.conftest import Served

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
META = {"session_id", "agent", "parent_session_id", "owner", "status", "status_detail",
        "version", "created_at", "updated_at"}  # fmt: skip


def error(answer: httpx.Response, status: int, code: str) -> str:
    """agents-server's error body: {"error": code, "message": text}; the message."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["error"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    return str(body["message"])


def create(http: httpx.Client, query: str = "", **fields: Any) -> httpx.Response:
    return http.post(f"/v1/sessions{query}", json={"agent": "my-agent", "prompt": "go",
                                                   **fields})  # fmt: skip


def test_create_by_slug_and_wait_answers_201_with_the_session_and_its_pending_calls(
    served: Served,
) -> None:
    """POST /v1/sessions?wait=true: `201` session, with a `Location` header."""
    with served.client() as http:
        made = create(http, "?wait=true")
        assert made.status_code == 201, made.text
        body = made.json()
        assert made.headers["location"] == f"/v1/sessions/{body['session_id']}"
        assert set(body) >= META and {"session", "pending"} <= set(body)
        assert body["agent"] == "my-agent" and body["status"] == "waiting_external"
        assert body["state"] == "waiting" and body["status_detail"] is None
        assert body["parent_session_id"] is None and body["owner"] is None
        assert RFC3339.match(body["created_at"]) and RFC3339.match(body["updated_at"])
        assert body["version"] == served.store.load(body["session_id"]).version > 1
        assert [t["kind"] for t in body["session"]["turns"]][:2] == ["user", "llm"]
        pending = {p["tool"]: p for p in body["pending"]}
        assert set(pending) == {"fetch_remote_a", "fetch_remote_b"}
        entry = pending["fetch_remote_a"]
        assert entry["disposition"]["tag"] == "defer"
        assert entry["disposition"]["reason"] == "external worker"
        assert entry["call"]["id"] == entry["tool_call_id"] == "call_remote_a"
        assert entry["call"]["type"] == "function"
        assert entry["call"]["function"]["name"] == "fetch_remote_a"
        assert json.loads(entry["call"]["function"]["arguments"]) == {"query": "orders today"}
        # the Location names the session: GET answers the same body
        again = http.get(made.headers["location"])
        assert again.status_code == 200
        assert {k: again.json()[k] for k in META} == {k: body[k] for k in META}
        assert again.json()["pending"] == body["pending"]


def test_run_none_stores_a_ready_session_and_nothing_runs(served: Served) -> None:
    """`run: "none"`: the session is stored as `ready`; nothing runs until resume."""
    with served.client() as http:
        made = create(http, "?wait=true", run="none")
        assert made.status_code == 201, made.text
        body = made.json()
        assert body["status"] == "ready" and body["pending"] == []
        assert len(body["session"]["turns"]) == 1
        later = http.get(f"/v1/sessions/{body['session_id']}").json()
        assert later["status"] == "ready" and later["version"] == body["version"]


def test_run_step_takes_one_step(served: Served) -> None:
    """`run: "step"` stops after one step; `until_blocked` goes on to the deferred calls."""
    with served.client() as http:
        stepped = create(http, "?wait=true", run="step").json()
        blocked = create(http, "?wait=true", run="until_blocked").json()
    assert blocked["status"] == "waiting_external"
    assert stepped["version"] < blocked["version"]
    assert len(stepped["session"]["turns"]) >= 2  # the model was asked once


def test_without_wait_the_answer_comes_at_once_and_get_waits_for_the_run(
    served: Served,
) -> None:
    """Without `wait`, the server answers as soon as the run has started;
    GET /v1/sessions/:id?wait=true answers once it stops."""
    with served.client() as http:
        made = create(http)
        assert made.status_code == 201, made.text
        assert made.json()["status"] in ("running", "ready", "waiting_external")
        waited = http.get(f"{made.headers['location']}?wait=true&timeout=60")
    assert waited.status_code == 200, waited.text
    assert waited.json()["status"] == "waiting_external"
    assert len(waited.json()["pending"]) == 2


def test_our_boolean_run_is_kept_as_an_alias(served: Served) -> None:
    with served.client() as http:
        ran = create(http, run=True).json()  # true: until_blocked, answered once stopped
        kept = create(http, run=False).json()
    assert ran["status"] == "waiting_external" and ran["state"] == "waiting"
    assert kept["status"] == "ready" and kept["state"] == "running"


def test_refusals_use_agents_servers_codes(served: Served) -> None:
    with served.client() as http:
        assert "no agent 'weather'" in error(create(http, agent="weather"), 404, "unknown_agent")
        error(create(http, "?wait=true&timeout=-1"), 400, "bad_request")
        error(create(http, run="often"), 422, "bad_request")  # a field: 422 here, 400 there
        error(http.get("/v1/sessions/s-nope"), 404, "unknown_session")
        error(http.get("/v1/nowhere"), 404, "not_found")
        error(http.put("/v1/sessions"), 405, "method_not_allowed")
    with served.client(None) as http:
        answer = create(http)
        error(answer, 401, "unauthorized")
        assert answer.headers["www-authenticate"] == "Bearer"
    assert served.store.list() == []


def test_listing_filters_and_pages(served: Served) -> None:
    """GET /v1/sessions?agent=&status=&parent=&limit=&before=: `{sessions, next_before}`,
    newest first by `updated_at`."""
    with served.client() as http:
        ids = [create(http, "?wait=true", run="none").json()["session_id"] for _ in range(3)]
        waiting = create(http, "?wait=true").json()["session_id"]
        first = http.get("/v1/sessions?limit=2").json()
        assert len(first["sessions"]) >= 2 and first["next_before"] is not None
        seen = [s["session_id"] for s in first["sessions"]]
        rest = http.get("/v1/sessions", params={"before": first["next_before"],
                                                "limit": 50}).json()  # fmt: skip
        assert rest["next_before"] is None
        seen += [s["session_id"] for s in rest["sessions"]]
        assert sorted(seen) == sorted([*ids, waiting])  # every session once, none lost
        listed = http.get("/v1/sessions").json()["sessions"]
        stamps = [s["updated_at"] for s in listed]
        assert stamps == sorted(stamps, reverse=True)
        assert set(listed[0]) >= META and "session" not in listed[0]
        ready = http.get("/v1/sessions?status=ready").json()["sessions"]
        assert sorted(s["session_id"] for s in ready) == sorted(ids)
        both = http.get("/v1/sessions?status=ready,waiting_external").json()["sessions"]
        assert len(both) == 4
        assert http.get("/v1/sessions?agent=my-agent").json()["sessions"] != []
        assert http.get("/v1/sessions?agent=weather").json()["sessions"] == []
        assert http.get(f"/v1/sessions?parent={waiting}").json()["sessions"] == []
        error(http.get("/v1/sessions?parent=s-nope"), 404, "unknown_session")
        error(http.get("/v1/sessions?status=sleeping"), 422, "bad_request")
        error(http.get("/v1/sessions?limit=0"), 422, "bad_request")
        error(http.get("/v1/sessions?before=yesterday"), 400, "bad_request")


def test_the_hardening_holds_on_these_routes(served: Served) -> None:
    """Roles still apply: a viewer reads, only an operator creates, a worker sees no
    session listing."""
    with served.client() as http:
        session_id = create(http, "?wait=true").json()["session_id"]
    with served.client("viewer") as http:
        assert http.get("/v1/sessions").status_code == 200
        assert http.get(f"/v1/sessions/{session_id}?wait=true").json()["pending"] != []
        error(create(http), 403, "forbidden")
    with served.client("worker-a") as http:
        error(http.get("/v1/sessions"), 403, "forbidden")
        error(http.get(f"/v1/sessions/{session_id}"), 403, "forbidden")
