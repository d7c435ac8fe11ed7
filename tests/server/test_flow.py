"""The seed's flow over HTTP, and agents-exe's continuation answers."""

from __future__ import annotations

import json
from pathlib import Path

from runner.server import create_app
from runner.stores import SQLiteStore
from tests.server.conftest import Served

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def start(served: Served) -> tuple[str, dict[str, str]]:
    """A session of the seed's agent run to its first wait: (id, tool -> token)."""
    with served.client() as http:
        made = http.post("/v1/sessions", json={"agent": "my-agent.scripted.json",
                                               "prompt": "go", "run": True})  # fmt: skip
        assert made.status_code == 201, made.text
        session_id = made.json()["session_id"]
        assert made.json()["state"] == "waiting"
        pending = http.get(f"/v1/sessions/{session_id}/pending").json()["calls"]
    return session_id, {c["tool"]: c["continuation_token"] for c in pending}


def test_the_seed_flow_end_to_end(served: Served) -> None:
    session_id, tokens = start(served)
    assert set(tokens) == {"fetch_remote_a", "fetch_remote_b"}
    with served.client() as http:
        reply = {"type": "json", "content": {"orders": 12}}
        done = http.post(f"/v1/continuations/{tokens['fetch_remote_a']}", json={"result": reply})
        assert done.status_code == 200 and done.json()["status"] == "applied"
        done = http.post(f"/v1/continuations/{tokens['fetch_remote_b']}",
                         json={"result": "3 open tickets"})  # fmt: skip
        assert done.json()["status"] == "applied"
        assert http.get(f"/v1/sessions/{session_id}/pending").json()["calls"] == []
        final = http.post(f"/v1/sessions/{session_id}/resume")
        assert final.status_code == 200, final.text
        assert final.json()["status"] == "completed"
        answer = final.json()["final_answer"]
        assert "All three calls are complete." in answer and "3 open tickets" in answer
        assert '"orders": 12' in answer or "12" in answer
        shown = http.get(f"/v1/sessions/{session_id}").json()
        assert shown["state"] == "completed" and "why" in shown
        assert shown["conditions"] == ["completed"]
        listed = http.get("/v1/sessions", params={"status": "completed"}).json()["sessions"]
        assert [row["id"] for row in listed] == [session_id]
        assert http.get("/v1/sessions", params={"status": "waiting"}).json()["sessions"] == []


def test_resume_true_continues_the_session(served: Served) -> None:
    _, tokens = start(served)
    with served.client() as http:
        http.post(f"/v1/continuations/{tokens['fetch_remote_a']}", json={"result": "a"})
        done = http.post(f"/v1/continuations/{tokens['fetch_remote_b']}",
                         json={"result": "b", "resume": True}).json()  # fmt: skip
    assert done["status"] == "applied" and done["resumed"]["status"] == "completed"


def test_continuation_answers(served: Served) -> None:
    session_id, tokens = start(served)
    token = tokens["fetch_remote_a"]
    with served.client() as http:
        assert http.post(f"/v1/continuations/{token}", json={"result": "x"}).json() == {
            "status": "applied",
            "session_id": session_id,
            "session_status": "waiting",
        }
        again = http.post(f"/v1/continuations/{token}", json={"result": "x"})
        assert again.status_code == 200 and again.json()["status"] == "already_completed"
        other = http.post(f"/v1/continuations/{token}", json={"result": "y"})
        assert other.status_code == 409
        assert other.json()["type"].endswith("token_already_completed")
        assert other.headers["content-type"] == "application/problem+json"
        unknown = http.post("/v1/continuations/nope", json={"result": "x"})
        assert unknown.status_code == 404 and unknown.json()["type"].endswith("unknown_token")
        failed = http.post(f"/v1/continuations/{tokens['fetch_remote_b']}/fail",
                           json={"reason": "the remote is down"})  # fmt: skip
        assert failed.status_code == 200 and failed.json()["status"] == "applied"
        call = http.get(f"/v1/sessions/{session_id}").json()["calls"]["call_remote_b"]
        assert call["result"]["status"] == "error"


def test_an_expired_call_answers_410_and_keeps_the_result_as_late(served: Served) -> None:
    session_id, tokens = start(served)
    session = served.store.load(session_id)
    for call in session.calls.values():
        if call.state == "deferred":
            call.expires_ms = 1  # long past
    served.store.save(session)
    with served.client() as http:
        late = http.post(f"/v1/continuations/{tokens['fetch_remote_a']}", json={"result": "x"})
        assert late.status_code == 410 and late.json()["type"].endswith("expired")
        shown = http.get(f"/v1/sessions/{session_id}").json()
    assert [r["call_id"] for r in shown["late_results"]] == ["call_remote_a"]


def test_cancel(served: Served) -> None:
    session_id, _ = start(served)
    with served.client() as http:
        assert http.post(f"/v1/sessions/{session_id}/cancel").json()["status"] == "cancelled"
        again = http.post(f"/v1/sessions/{session_id}/cancel")
        assert again.status_code == 200 or again.status_code == 409


def test_the_committed_openapi_document_matches_the_app(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        document = create_app(store, None, None).openapi()
    finally:
        store.close()
    assert json.loads(OPENAPI.read_text()) == document, (
        "docs/openapi.json is stale: regenerate it with scripts/gen-schemas"
    )
