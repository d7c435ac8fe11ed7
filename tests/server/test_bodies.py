"""Request bodies are read with the envelope's strict JSON rules, naming where a rule is
broken; a body that is not JSON by its Content-Type is 415. Nothing is applied."""

from __future__ import annotations

import pytest

from tests.server.conftest import Served
from tests.server.test_flow import start
from tests.server.test_problems import problem

JSON = {"content-type": "application/json"}
CREATE = b'{"agent": "my-agent.scripted.json", "prompt": "p"}'


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b'{"result": {"type": "json", "content": {"a": 1, "a": 2}}}',
         "body.result.content.a: duplicate key 'a' in an object"),
        (b'{"result": "x", "result": "y"}', "body.result: duplicate key 'result'"),
        (b'{"result": {"type": "json", "content": [1, NaN]}}',
         "body.result.content[1]: NaN is not valid JSON"),
        (b'{"result": -Infinity}', "body.result: -Infinity is not valid JSON"),
        (b'{"result": [9007199254740993]}', "body.result[0]: integer 9007199254740993 is outside"),
        (b'{"result": 1e400}', "body.result: number 1e400 overflows a double"),
        (b'{"result": "\\ud800"}', "body.result: a lone surrogate"),
        (b'{"result": ' + b"[" * 70 + b"]" * 70 + b"}", "body.result" + "[0]" * 63 + ": nesting"),
        (b'{"result": "x"} {}', "body: the body is not JSON: trailing data"),
        (b'\xef\xbb\xbf{"result": "x"}', "body: the body is not JSON: input starts with a byte"),
        (b'{"result": "\xff"}', "body: the body is not JSON: invalid UTF-8 at byte 12"),
    ],
)  # fmt: skip
def test_a_body_breaking_a_strict_rule_is_400_naming_where(served: Served, body: bytes,
                                                           detail: str) -> None:  # fmt: skip
    session_id, tokens = start(served)
    token = tokens["fetch_remote_a"]
    with served.client() as http:
        answer = http.post(f"/v1/continuations/{token}", content=body, headers=JSON)
    assert str(problem(answer, 400)["detail"]).startswith(detail)
    assert served.store.load(session_id).calls["call_remote_a"].state == "deferred"


def test_a_body_that_is_not_an_object_is_422(served: Served) -> None:
    with served.client() as http:
        answer = http.post("/v1/sessions", content=b"[1, 2]", headers=JSON)
    assert problem(answer, 422)["detail"] == "body: expected a JSON object, got list"


def test_strict_rules_hold_on_every_route(served: Served) -> None:
    with served.client() as http:
        answer = http.post("/v1/sessions", headers=JSON,
                           content=b'{"agent": "a", "prompt": "p", "prompt": "q"}')  # fmt: skip
    assert str(problem(answer, 400)["detail"]).startswith("body.prompt: duplicate key")


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x",
     "application/json; charset=latin-1"],
)  # fmt: skip
def test_a_body_that_is_not_json_by_its_type_is_415(served: Served,
                                                    content_type: str | None) -> None:  # fmt: skip
    headers = {"content-type": content_type} if content_type else {}
    with served.client() as http:
        answer = http.post("/v1/sessions", headers=headers, content=CREATE)
    assert answer.request.headers.get("content-type") == content_type
    detail = str(problem(answer, 415)["detail"])
    assert "application/json" in detail or "UTF-8" in detail
    assert served.store.list() == []


@pytest.mark.parametrize("content_type", ["application/json; charset=UTF-8",
                                          "application/merge-patch+json"])  # fmt: skip
def test_json_media_types_are_taken(served: Served, content_type: str) -> None:
    with served.client() as http:
        answer = http.post("/v1/sessions", headers={"content-type": content_type}, content=CREATE)
    assert answer.status_code == 201, answer.text


def test_a_missing_body_where_one_is_needed_is_422(served: Served) -> None:
    _, tokens = start(served)
    with served.client() as http:
        answer = http.post(f"/v1/continuations/{tokens['fetch_remote_a']}")
    assert str(problem(answer, 422)["detail"]).startswith("body:")


def test_a_body_over_max_values_is_413_and_a_large_one_is_still_located(served: Served) -> None:
    _, tokens = start(served)
    token = tokens["fetch_remote_a"]
    many = b'{"result": [' + b"0," * 1_000_000 + b"0]}"  # past envelopes.wire.MAX_VALUES
    large = b'{"result": {"type": "json", "content": [' + b"1," * 100_000 + b"NaN]}}"
    with served.client() as http:
        refused = http.post(f"/v1/continuations/{token}", content=many, headers=JSON)
        located = http.post(f"/v1/continuations/{token}", content=large, headers=JSON)
    assert problem(refused, 413)["detail"] == "body: document holds more than 1000000 values"
    assert str(problem(located, 400)["detail"]).startswith(
        "body.result.content[100000]: NaN is not valid JSON"
    )
