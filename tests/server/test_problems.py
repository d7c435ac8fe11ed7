"""Bad input gets application/problem+json naming the field, never a 500."""

from __future__ import annotations

from pathlib import Path

import httpx

from runner.server.problems import error_code
from runner.stores import SQLiteStore
from tests.server.conftest import Served
from tests.server.test_flow import start

PROBLEM = "application/problem+json"


def problem(answer: httpx.Response, status: int) -> dict[str, object]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == PROBLEM
    body: dict[str, object] = answer.json()
    assert set(body) == {"type", "title", "status", "detail", "error", "message"}
    assert body["status"] == status
    # agents-server's error body is the same object: its code, and the detail as message
    assert body["message"] == body["detail"] and isinstance(body["error"], str)
    assert body["error"] == error_code(status, str(body["type"]).rsplit(":", 1)[-1])
    return body


def test_malformed_json_is_400(served: Served) -> None:
    with served.client() as http:
        answer = http.post("/v1/sessions", content=b'{"agent": ',
                           headers={"content-type": "application/json"})  # fmt: skip
    assert "not JSON" in str(problem(answer, 400)["detail"])


def test_a_missing_or_wrong_field_is_422_naming_its_path(served: Served) -> None:
    _, tokens = start(served)
    with served.client() as http:
        missing = problem(http.post("/v1/sessions", json={"agent": "x"}), 422)
        assert str(missing["detail"]).startswith("body.prompt:")
        extra = http.post("/v1/sessions", json={"agent": "x", "prompt": "p", "surprise": 1})
        assert str(problem(extra, 422)["detail"]).startswith("body.surprise:")
        wrong = http.post("/v1/sessions", json={"agent": "x", "prompt": "p", "run": "often"})
        assert str(problem(wrong, 422)["detail"]).startswith("body.run:")
        no_result = http.post(f"/v1/continuations/{tokens['fetch_remote_a']}", json={})
        assert str(problem(no_result, 422)["detail"]).startswith("body.result:")
        bad_response = http.post(f"/v1/continuations/{tokens['fetch_remote_a']}",
                                 json={"result": {"type": "json"}})  # fmt: skip
        assert "body.result" in str(problem(bad_response, 422)["detail"])
        unknown_agent = http.post("/v1/sessions", json={"agent": "../etc", "prompt": "p"})
        assert str(problem(unknown_agent, 404)["detail"]).startswith("body.agent:")
        status = http.get("/v1/sessions", params={"status": "sleepy"})
        assert str(problem(status, 422)["detail"]).startswith("query.status:")
        problem(http.get("/v1/sessions/no-such-session"), 404)
        problem(http.get("/v1/sessions/no-such-session/pending"), 404)
        problem(http.post("/v1/sessions/no-such-session/resume"), 404)
        problem(http.get("/v1/nowhere"), 404)
        problem(http.delete("/v1/sessions"), 405)


def test_an_oversized_body_is_413(served: Served) -> None:
    big = b'{"result": "' + b"x" * (16 * 1024 * 1024) + b'"}'
    with served.client() as http:
        answer = http.post("/v1/continuations/t", content=big,
                           headers={"content-type": "application/json"})  # fmt: skip
        problem(answer, 413)

        def chunks():  # no Content-Length: counted as it arrives
            yield b'{"result": "'
            for _ in range(17):
                yield b"x" * (1024 * 1024)
            yield b'"}'

        chunked = http.post("/v1/continuations/t", content=chunks(),
                            headers={"content-type": "application/json"})  # fmt: skip
        problem(chunked, 413)


def test_probes(served: Served, tmp_path: Path) -> None:
    with served.client(None) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/readyz").json() == {"status": "ready"}  # details need a token
    with served.client() as http:
        assert http.get("/readyz").json() == {"status": "ready", "store": "ok"}
    served.store.close()  # the store is gone: not ready, still alive
    with served.client() as http:
        gone = http.get("/readyz")
        assert gone.status_code == 503 and gone.json()["status"] == "unavailable"
        assert gone.json()["store"] != "ok"
        assert http.get("/healthz").status_code == 200
    served.store = SQLiteStore(tmp_path / "other.db")  # for the fixture's close


def test_error_bodies_are_also_agents_servers(served: Served) -> None:
    """One body, both shapes: agents-server's `error` codes beside problem+json."""
    with served.client() as http:
        unknown_path = http.get("/v1/nowhere")
        wrong_method = http.delete("/v1/continuations/x")
        json_type = {"content-type": "application/json"}
        bad_json = http.post("/v1/sessions", content=b"{", headers=json_type)
        unknown_session = http.get("/v1/sessions/s-none")
    with served.client(None) as http:
        unauthorized = http.get("/v1/sessions")
    assert problem(unknown_path, 404)["error"] == "not_found"
    assert problem(wrong_method, 405)["error"] == "method_not_allowed"
    assert problem(bad_json, 400)["error"] == "bad_request"
    assert problem(unknown_session, 404)["error"] == "unknown_session"
    assert problem(unauthorized, 401)["error"] == "unauthorized"
    assert unauthorized.headers["www-authenticate"] == "Bearer"
