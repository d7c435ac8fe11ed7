"""POST /v1/sessions beyond a file name: an inline agent definition (operator only, or
without access control) and attachments checked by `session start --attach`'s rules."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from runner.server import create_app
from runner.state import UserTurn
from runner.stores import SQLiteStore
from tests.server.conftest import SEED, Served, serving
from tests.server.test_problems import problem

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24


def inline_agent() -> dict[str, Any]:
    """The seed's scripted agent with its script inline (a server reads no script file)."""
    document: dict[str, Any] = json.loads((SEED / "my-agent.scripted.json").read_text())
    script = json.loads((SEED / "my-agent.script.json").read_text())
    document["provider"] = {"tag": "scripted", "responses": script["responses"]}
    return document


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def test_an_operator_may_give_the_agent_inline(served: Served) -> None:
    with served.client() as http:
        made = http.post("/v1/sessions", json={"agent": inline_agent(), "prompt": "go",
                                               "run": True})  # fmt: skip
        assert made.status_code == 201, made.text
        assert made.json()["state"] == "waiting"
        session_id = made.json()["session_id"]
        pending = http.get(f"/v1/sessions/{session_id}/pending").json()["calls"]
    assert {c["tool"] for c in pending} == {"fetch_remote_a", "fetch_remote_b"}
    assert served.store.load(session_id).agent_slug == "my-agent"


@pytest.mark.parametrize("who", ["viewer", "worker-a"])
def test_other_roles_may_not_create_sessions_inline_or_not(served: Served, who: str) -> None:
    with served.client(who) as http:
        inline = http.post("/v1/sessions", json={"agent": inline_agent(), "prompt": "go"})
        named = http.post("/v1/sessions", json={"agent": "my-agent.scripted.json",
                                                "prompt": "go"})  # fmt: skip
    problem(inline, 403)
    problem(named, 403)
    assert served.store.list() == []


def test_without_access_control_inline_agents_are_taken(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        with serving(create_app(store, None, None)) as url:
            made = httpx.post(f"{url}/v1/sessions", json={"agent": inline_agent(),
                                                          "prompt": "go"})  # fmt: skip
            assert made.status_code == 201, made.text
            by_name = httpx.post(f"{url}/v1/sessions", json={"agent": "x.json", "prompt": "go"})
            assert "no --agents DIR" in str(problem(by_name, 422)["detail"])
    finally:
        store.close()


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda a: a.update(slug="Not A Slug"), "body.agent: slug:"),
        (lambda a: a["toolCallPolicyConfig"]["rules"][0]["disposition"].update(tag="nope"),
         "body.agent: toolCallPolicyConfig.rules[0].disposition"),
        (lambda a: a.update(provider={"tag": "scripted", "script": "my-agent.script.json"}),
         "body.agent.provider.script:"),
        (lambda a: a.update(apiKeyId="k"), "body.agent: apiKeyId:"),
    ],
)  # fmt: skip
def test_a_wrong_inline_agent_is_422_naming_its_field(served: Served, change: Any,
                                                      where: str) -> None:  # fmt: skip
    agent = inline_agent()
    change(agent)
    with served.client() as http:
        answer = http.post("/v1/sessions", json={"agent": agent, "prompt": "go"})
    assert str(problem(answer, 422)["detail"]).startswith(where)
    assert served.store.list() == []


def test_attachments_are_stored_with_the_prompt(served: Served) -> None:
    attachments = [
        {"name": "shot.png", "data": b64(PNG)},
        {"name": "notes.md", "data": b64("héllo".encode()), "mime_type": "text/markdown"},
        {"name": "plain.txt", "data": b64(b"words"), "mime_type": "text/plain"},
    ]
    body = {"agent": "my-agent.scripted.json", "prompt": "look", "attachments": attachments}
    with served.client() as http:
        made = http.post("/v1/sessions", json=body)
    assert made.status_code == 201, made.text
    first = served.store.load(made.json()["session_id"]).turns[0]
    assert isinstance(first, UserTurn) and first.text == "look"
    image, notes, plain = first.attachments
    assert (image.kind, image.name, image.mime_type) == ("image", "shot.png", "image/png")
    assert base64.b64decode(image.data) == PNG
    assert (notes.kind, notes.mime_type, notes.data) == ("text", "text/markdown", "héllo")
    assert (plain.kind, plain.data) == ("text", "words")


@pytest.mark.parametrize(
    ("attachment", "detail"),
    [
        ({"name": "a.txt", "data": "not base64!"}, "body.attachments[1].data: not base64"),
        ({"name": "fake.png", "data": b64(b"text")},
         "body.attachments[1] (fake.png): named like image/png but its bytes are not"),
        ({"name": "bin", "data": b64(b"a\x00b")}, "body.attachments[1] (bin): neither an image"),
        ({"name": "bin", "data": b64(b"\xff\xfe")}, "body.attachments[1] (bin): neither an image"),
        ({"name": "empty.txt", "data": ""}, "body.attachments[1] (empty.txt): the file is empty"),
        ({"name": "big.txt", "data": b64(b"x" * (1024 * 1024 + 1))},
         "body.attachments[1] (big.txt): 1.0 MiB is over the 1.0 MiB limit for a text file"),
        ({"name": "p.bin", "data": b64(PNG), "mime_type": "image/gif"},
         "body.attachments[1].mime_type: 'image/gif', but the bytes are image/png"),
        ({"name": "t", "data": b64(b"x"), "mime_type": "image/png"},
         "body.attachments[1].mime_type: 'image/png', but the bytes are text/plain"),
        ({"name": "../etc/passwd", "data": b64(b"x")}, "body.attachments[1].name:"),
        ({"name": "a", "data": b64(b"x"), "extra": 1}, "body.attachments[1].extra:"),
        ({"data": b64(b"x")}, "body.attachments[1].name:"),
    ],
)  # fmt: skip
def test_a_refused_attachment_is_422_naming_it(served: Served, attachment: dict[str, Any],
                                               detail: str) -> None:  # fmt: skip
    body = {"agent": "my-agent.scripted.json", "prompt": "look",
            "attachments": [{"name": "ok.txt", "data": b64(b"fine")}, attachment]}  # fmt: skip
    with served.client() as http:
        answer = http.post("/v1/sessions", json=body)
    assert str(problem(answer, 422)["detail"]).startswith(detail)
    assert served.store.list() == []
