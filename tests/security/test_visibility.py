"""Issue 23, findings 2 and 4: what each role sees, over a real uvicorn on loopback.

Every route and Server-Sent-Event kind is called as each role (operator, viewer, a
worker granted `fetch_remote_a`, one granted `fetch_remote_b`); canaries sit in each
tool's arguments and results, in the prompt, the model's text, the final answer, the
continuation tokens and a localProcess spec's env value. What a role may not see must
appear nowhere in anything it was answered; what it may see must appear (so the matrix
cannot pass by seeing nothing)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runner.server import create_app
from runner.stores import SQLiteStore
from tests.server.conftest import TOKENS, Served, grants, serving

ROLES = ("operator", "viewer", "worker-a", "worker-b")
SECRET_ENV = "canary-env-7d1f0b"  # a localProcess spec's env value
PROMPT = "canary-prompt-51aa"
TEXT = "canary-llm-text-0c3e"
FINAL = "canary-final-answer-9e42"
ARG = {"a": "canary-arg-a-1b2c", "b": "canary-arg-b-3d4e", "iso": "canary-arg-iso-5f60"}
RESULT = {"a": "canary-result-a-7a8b", "b": "canary-result-b-9c0d", "iso": "canary-result-iso"}
TOOL = {"a": "fetch_remote_a", "b": "fetch_remote_b", "iso": "run_local"}

ISOLATED = {
    "tag": "runIsolated",
    "attached": False,
    "spec": {"tag": "localProcess", "argv": ["true"], "env": {"API_KEY": SECRET_ENV}},
}
#: Turn 1 waits on a and an isolated call, turn 2 on b and another, then the answer.
AGENT = {
    "slug": "canaries",
    "provider": {"tag": "scripted", "responses": [
        {"text": TEXT, "tool_calls": [
            {"id": "call_a", "name": "fetch_remote_a", "arguments": {"q": ARG["a"]}},
            {"id": "call_iso", "name": "run_local", "arguments": {"q": ARG["iso"]}}]},
        {"text": TEXT, "tool_calls": [
            {"id": "call_b", "name": "fetch_remote_b", "arguments": {"q": ARG["b"]}},
            {"id": "call_iso2", "name": "run_local", "arguments": {"q": ARG["iso"]}}]},
        {"text": FINAL}]},
    "executionMode": "asynchronous",
    "toolCallPolicyConfig": {"rules": [
        {"tool": "fetch_remote_a", "disposition": {"tag": "defer", "reason": "worker a"}},
        {"tool": "fetch_remote_b", "disposition": {"tag": "defer", "reason": "worker b"}},
        {"tool": "run_local", "disposition": ISOLATED}]},
}  # fmt: skip


class Seen:
    """Everything each role was answered, as text."""

    def __init__(self) -> None:
        self.text: dict[str, list[str]] = defaultdict(list)

    def add(self, who: str, answer: httpx.Response, route: str) -> httpx.Response:
        self.text[who].append(f"{route} -> {answer.status_code} {answer.text}")
        return answer

    def of(self, who: str) -> str:
        return "\n".join(self.text[who])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "canaries.json").write_text(json.dumps(AGENT))
    store = SQLiteStore(tmp_path / "state.db")
    try:
        with serving(create_app(store, agents, grants())) as url:
            yield Served(url, store)
    finally:
        store.close()


def client(served: Served, who: str) -> httpx.Client:
    return httpx.Client(base_url=served.url, timeout=30,
                        headers={"Authorization": f"Bearer {TOKENS[who]}"})  # fmt: skip


def new_session(served: Served, seen: Seen) -> str:
    with client(served, "operator") as http:
        made = seen.add("operator", http.post("/v1/sessions", json={
            "agent": "canaries.json", "prompt": PROMPT, "run": True}), "create")  # fmt: skip
    assert made.status_code == 201 and made.json()["state"] == "waiting", made.text
    session_id: str = made.json()["session_id"]
    return session_id


def open_tokens(served: Served, sid: str, tokens: dict[str, list[str]]) -> dict[str, str]:
    """The session's open calls' tokens by tool key (each also noted in `tokens`)."""
    with client(served, "operator") as http:
        calls = http.get(f"/v1/sessions/{sid}/pending").json()["calls"]
    key = {t: k for k, t in TOOL.items()}
    found = {key[c["tool"]]: c["continuation_token"] for c in calls}
    for k, token in found.items():
        tokens[k].append(token)
    return found


def read_all(served: Served, who: str, path: str, seen: Seen) -> list[dict[str, Any]]:
    """An event stream from the first event until it has been quiet for a while (it
    has caught up from the store): the events' JSON."""
    events: list[dict[str, Any]] = []
    timeout = httpx.Timeout(30, read=0.75)
    with (
        client(served, who) as http,
        http.stream("GET", path, params={"after": 0}, timeout=timeout) as answer,
    ):
        assert answer.status_code == 200, who
        try:
            for line in answer.iter_lines():
                if line.startswith("data:"):
                    events.append(json.loads(line[5:]))
                    seen.text[who].append(f"{path} event {line}")
        except httpx.ReadTimeout:
            pass
    return events


def reads(served: Served, seen: Seen, sids: list[str]) -> None:
    """Every read route, as every role."""
    for who in ROLES:
        with client(served, who) as http:
            for sid in sids:
                for route in (f"/v1/sessions/{sid}", f"/v1/sessions/{sid}/pending"):
                    seen.add(who, http.get(route), route)
            seen.add(who, http.get("/v1/sessions"), "/v1/sessions")
            if who != "operator":  # refused: a viewer claims nothing, a worker only its own
                others = [t for t in TOOL.values() if who == "viewer" or t[-1] != who[-1]]
                answer = seen.add(who, http.post("/v1/claims", json={"tools": others}), "claim")
                assert answer.status_code == 403, answer.text


def post(served: Served, seen: Seen, who: str, path: str, body: dict[str, Any]) -> Any:
    with client(served, who) as http:
        answer = seen.add(who, http.post(path, json=body), path)
    assert answer.status_code == 200, answer.text
    return answer.json()


def claim(served: Served, seen: Seen, who: str, sid: str) -> str:
    tool = TOOL[who[-1]]
    claims = post(served, seen, who, "/v1/claims", {"tools": [tool], "max": 10})["claims"]
    token: str = next(c["claim"] for c in claims if c["session_id"] == sid)
    return token


def test_each_role_sees_only_its_grant(served: Served) -> None:
    seen, tokens = Seen(), defaultdict(list)
    # Session 1, by continuations: worker a's resume reaches turn 2 (b and another
    # isolated call open), worker b's resume the final answer.
    s1 = new_session(served, seen)
    t = open_tokens(served, s1, tokens)
    reads(served, seen, [s1])
    post(served, seen, "operator", f"/v1/continuations/{t['iso']}", {"result": RESULT["iso"]})
    done = post(served, seen, "worker-a", f"/v1/continuations/{t['a']}",
                {"result": RESULT["a"], "resume": True})  # fmt: skip
    assert done["resumed"]["status"] == "waiting"
    t = open_tokens(served, s1, tokens)
    reads(served, seen, [s1])
    post(served, seen, "operator", f"/v1/continuations/{t['iso']}", {"result": RESULT["iso"]})
    done = post(served, seen, "worker-b", f"/v1/continuations/{t['b']}",
                {"result": RESULT["b"], "resume": True})  # fmt: skip
    assert done["resumed"]["status"] == "completed"

    # Session 2, the same by claims (b's claim fails its call).
    s2 = new_session(served, seen)
    t = open_tokens(served, s2, tokens)
    post(served, seen, "operator", f"/v1/continuations/{t['iso']}", {"result": RESULT["iso"]})
    done = post(served, seen, "worker-a", f"/v1/claims/{claim(served, seen, 'worker-a', s2)}"
                "/complete", {"result": RESULT["a"], "resume": True})  # fmt: skip
    assert done["resumed"]["status"] == "waiting"
    t = open_tokens(served, s2, tokens)
    post(served, seen, "operator", f"/v1/continuations/{t['iso']}", {"result": RESULT["iso"]})
    done = post(served, seen, "worker-b", f"/v1/claims/{claim(served, seen, 'worker-b', s2)}"
                "/fail", {"reason": RESULT["b"], "resume": True})  # fmt: skip
    assert done["resumed"]["status"] == "completed"

    # Session 3, the operator's actions: pause, freeze, resume, pause, cancel.
    s3 = new_session(served, seen)
    open_tokens(served, s3, tokens)
    for action in ("pause", "freeze", "resume", "pause", "cancel"):
        post(served, seen, "operator", f"/v1/sessions/{s3}/{action}", {})

    kinds: dict[str, set[str]] = {}
    reads(served, seen, [s1, s2, s3])
    for who in ROLES:
        events = read_all(served, who, "/v1/events", seen)
        for sid in (s1, s2, s3):
            events += read_all(served, who, f"/v1/sessions/{sid}/events", seen)
        kinds[who] = {e["kind"] for e in events}

    # Every kind this scenario makes reached the operator and the viewer; a worker got
    # its tools' call events and nothing else.
    made = {"session.created", "session.running", "session.waiting", "session.completed",
            "session.frozen", "session.cancelled", "call.deferred", "call.completed",
            "call.failed"}  # fmt: skip
    assert kinds["operator"] >= made and kinds["viewer"] >= made
    assert kinds["worker-a"] == kinds["worker-b"] == {"call.deferred", "call.completed",
                                                      "call.failed"}  # fmt: skip

    everything_but_env = [PROMPT, TEXT, FINAL, *ARG.values(), *RESULT.values(),
                          *(t for ts in tokens.values() for t in ts)]  # fmt: skip
    wrong: list[str] = []  # every role's faults at once
    for who in ("operator", "viewer"):
        text = seen.of(who)
        if SECRET_ENV in text:
            wrong.append(f"the {who} was shown the env value")
        if '"API_KEY":"<redacted>"' not in text.replace(" ", ""):
            wrong.append(f"the {who} was not shown the env's name")
        missing = [c for c in everything_but_env if c not in text]
        if missing:
            wrong.append(f"the {who} should see {missing}")
    for who, own, other in (("worker-a", "a", "b"), ("worker-b", "b", "a")):
        text = seen.of(who)
        forbidden = {"env value": SECRET_ENV, "prompt": PROMPT, "model text": TEXT,
                     "final answer": FINAL, "other args": ARG[other],
                     "other result": RESULT[other], "isolated args": ARG["iso"],
                     "isolated result": RESULT["iso"],
                     **{f"{k} token {i}": token for k in (other, "iso")
                        for i, token in enumerate(tokens[k])}}  # fmt: skip
        leaked = sorted(name for name, canary in forbidden.items() if canary in text)
        if leaked:
            wrong.append(f"{who} was shown: {', '.join(leaked)}")
        missing = [c for c in (ARG[own], RESULT[own], *tokens[own]) if c not in text]
        if missing:  # its own work it does see
            wrong.append(f"{who} should see {missing}")
    assert not wrong, "\n".join(wrong)


def test_a_viewer_never_reads_an_env_value(served: Served) -> None:
    """Finding 4 on its own: the viewer's GET of the session and its pending calls."""
    seen = Seen()
    sid = new_session(served, seen)
    with client(served, "viewer") as http:
        for route in (f"/v1/sessions/{sid}", f"/v1/sessions/{sid}/pending"):
            answer = http.get(route)
            assert answer.status_code == 200, answer.text
            assert SECRET_ENV not in answer.text, route
            assert "API_KEY" in answer.text, route  # the name is kept


def test_the_stored_decision_keeps_no_env_value(served: Served) -> None:
    seen = Seen()
    sid = new_session(served, seen)
    stored = served.store.load(sid).calls["call_iso"].disposition
    assert stored["spec"]["env"] == {"API_KEY": "<redacted>"}
    assert SECRET_ENV not in json.dumps(served.store.agent_document(
        served.store.load(sid).agent_hash))  # fmt: skip
