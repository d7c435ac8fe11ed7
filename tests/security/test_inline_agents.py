"""Finding 3 of issue 23: an agent posted inline to `POST /v1/sessions` was a shell on the
server's host (a `localProcess` argv), and its provider could send any server environment
variable, as a bearer token, to any URL. Against a real `agents-runner serve` on loopback:
every place a disposition can sit is refused naming its field, nothing runs and nothing is
sent; `--allow-base-url` and `--trust-inline-agents` lift exactly what they say, and the
operator's own agent files are not held to the rules."""

from __future__ import annotations

import copy
import hashlib
import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chat_server import ChatServer
from tests.server.processes import Serve, start_serve, write_json

TOKEN = "inline-operator-secret"
CANARY = "canary-3f1b9c-server-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def tokens_file(directory: Path) -> Path:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    return write_json(directory / "tokens.json",
                      [{"name": "ops", "role": "operator", "sha256": digest}])  # fmt: skip


def agent(disposition: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A scripted agent whose first reply calls `bash`, run as `disposition` says."""
    return {
        "slug": "inline",
        "provider": {"tag": "scripted", "responses": [
            {"text": "", "tool_calls": [{"id": "c1", "name": "bash",
                                         "arguments": {"script": "id"}}]},
            {"text": "done"},
        ]},
        "tools": [{"name": "bash", "kind": "bash"}],
        "executionMode": "asynchronous",
        "toolCallPolicyConfig": {"default": {"tag": "defer", "reason": "outside"},
                                 "rules": [{"tool": "bash", "disposition": disposition}]},
        **extra,
    }  # fmt: skip


def shell(marker: Path) -> dict[str, Any]:
    """A runIsolated disposition whose worker is a program on the host leaving `marker`."""
    argv = ["/bin/sh", "-c", f"touch {marker}"]
    return {"tag": "runIsolated", "spec": {"tag": "localProcess", "argv": argv}}


def docker(**spec: Any) -> dict[str, Any]:
    return {"tag": "runIsolated", "spec": {"tag": "docker", "image": "bash-runner", **spec}}


def problem(answer: httpx.Response, status: int) -> str:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json", answer.headers
    detail: str = answer.json()["detail"]
    return detail


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """A server with tokens and the default rules, its environment holding a secret."""
    directory = tmp_path_factory.mktemp("inline")
    served = start_serve(str(directory / "s.db"), directory, "--tokens",
                         str(tokens_file(directory)), "--poll-seconds", "0.05",
                         env={"SERVER_SECRET": CANARY})  # fmt: skip
    yield served
    assert served.stop() == 0, served.stderr()


def post(served: Serve, document: dict[str, Any]) -> httpx.Response:
    with served.client(TOKEN) as http:
        return http.post("/v1/sessions", json={"agent": document, "prompt": "go", "run": True})


def sessions(served: Serve) -> list[Any]:
    with served.client(TOKEN) as http:
        found: list[Any] = http.get("/v1/sessions").json()["sessions"]
        return found


RULE = "body.agent.toolCallPolicyConfig.rules[0].disposition"


def _in_default(document: dict[str, Any], disposition: dict[str, Any]) -> None:
    document["toolCallPolicyConfig"] = {"default": disposition}


def _in_decorate(document: dict[str, Any], disposition: dict[str, Any]) -> None:
    rule = document["toolCallPolicyConfig"]["rules"][0]
    rule["disposition"] = {"tag": "decorate", "decorators": [{"tag": "timeout", "seconds": 5}],
                           "inner": {"tag": "decorate", "decorators": [{"tag": "label",
                                     "label": "x"}], "inner": disposition}}  # fmt: skip


def _under_wrappers(document: dict[str, Any], disposition: dict[str, Any]) -> None:
    policy = document["toolCallPolicyConfig"]
    policy["wrappers"] = [{"match": {"tool": "*"}, "decorators": [{"tag": "retries",
                                                                   "count": 1}]}]  # fmt: skip
    policy["rules"] = [{"tool": "other", "disposition": {"tag": "runSync"}},
                       {"match": {"tool": "bash"}, "disposition": disposition}]  # fmt: skip


PLACES: list[tuple[str, Callable[[dict[str, Any], dict[str, Any]], None], str]] = [
    ("rule", lambda d, disp: None, f"{RULE}.spec"),
    ("default", _in_default, "body.agent.toolCallPolicyConfig.default.spec"),
    ("decorate", _in_decorate, f"{RULE}.inner.inner.spec"),
    ("wrapped", _under_wrappers, "body.agent.toolCallPolicyConfig.rules[1].disposition.spec"),
]


@pytest.mark.parametrize(("place", "put", "where"), PLACES, ids=[p[0] for p in PLACES])
def test_a_local_process_anywhere_in_the_policy_is_refused_and_never_runs(
    server: Serve, tmp_path: Path, place: str, put: Any, where: str
) -> None:
    marker = tmp_path / f"ran-{place}"
    document = agent(shell(marker))
    disposition = document["toolCallPolicyConfig"]["rules"][0]["disposition"]
    put(document, copy.deepcopy(disposition))
    before = len(sessions(server))
    detail = problem(post(server, document), 403)
    assert detail.startswith(f"{where}.tag: 'localProcess' runs"), detail
    assert "--trust-inline-agents" in detail
    time.sleep(0.5)  # the worker loop polls every 0.05 s: it would have run it by now
    assert not marker.exists()
    assert len(sessions(server)) == before


@pytest.mark.parametrize(
    ("disposition", "extra", "where"),
    [
        (docker(network="host"), {}, f"{RULE}.spec.network: 'host'"),
        (docker(network="bridge"), {}, f"{RULE}.spec.network: 'bridge'"),
        (docker(egress={"allow": ["example.test:443"], "network": "bridge"}), {},
         f"{RULE}.spec.egress.network: chooses"),
        (docker(egress={"allow": ["example.test:443"], "allowAddresses": ["10.0.0.0/8"]}), {},
         f"{RULE}.spec.egress.allowAddresses:"),
        ({"tag": "runIsolated", "spec": {"tag": "localProcess", "argv": ["true"],
                                         "env": {"A": "b"}}}, {},
         f"{RULE}.spec.tag: 'localProcess' runs 'true'"),
        ({"tag": "defer", "reason": "x"},
         {"provider": {"tag": "openaiCompatible", "baseUrl": "http://127.0.0.1:9/v1",
                       "model": "m", "apiKeyEnv": "SERVER_SECRET"}},
         "body.agent.provider.apiKeyEnv: would send the server's environment variable"
         " 'SERVER_SECRET'"),
        ({"tag": "defer", "reason": "x"},
         {"provider": {"tag": "openaiCompatible", "baseUrl": "http://127.0.0.1:9/v1",
                       "model": "m"}},
         "body.agent.provider.baseUrl: 'http://127.0.0.1:9/v1' is not a model endpoint"),
        ({"tag": "defer", "reason": "x"},
         {"provider": {"tag": "environment", "baseUrl": "http://127.0.0.1:9/v1"}},
         "body.agent.provider.baseUrl: 'http://127.0.0.1:9/v1' is not a model endpoint"),
    ],
    ids=["host-network", "named-network", "egress-network", "egress-private", "env",
         "api-key-env", "openai-base-url", "environment-base-url"],
)  # fmt: skip
def test_what_reaches_the_host_is_refused_naming_its_field(
    server: Serve, disposition: dict[str, Any], extra: dict[str, Any], where: str
) -> None:
    document = agent(disposition, **extra)
    detail = problem(post(server, document), 403)
    assert detail.startswith(where), detail


def test_the_env_of_a_local_process_is_named_too(server: Serve) -> None:
    spec = {"tag": "localProcess", "argv": ["true"], "env": {"A": "b"}}
    detail = problem(post(server, agent({"tag": "runIsolated", "spec": spec})), 403)
    assert detail.endswith("(and 1 more)"), detail


def test_agents_exe_model_url_is_held_to_the_list(server: Serve) -> None:
    document = agent({"tag": "defer", "reason": "x"})
    del document["provider"]
    document.update(modelUrl="http://127.0.0.1:9/v1", modelName="m")
    assert "provider.baseUrl: 'http://127.0.0.1:9/v1'" in problem(post(server, document), 403)


def test_a_docker_call_without_a_network_is_still_taken(server: Serve) -> None:
    """The sandbox is what inline agents get: refused only for what it would open."""
    document = agent({**docker(), "attached": False})
    document["provider"]["responses"] = [{"text": "nothing to run"}]
    made = post(server, document)
    assert made.status_code == 201, made.text


def test_the_servers_secret_never_leaves_for_a_url_it_was_not_given(
    server: Serve, chat_server: ChatServer
) -> None:
    chat_server.reply({"role": "assistant", "content": "thanks"})
    document = agent({"tag": "defer", "reason": "x"}, provider={
        "tag": "openaiCompatible", "baseUrl": chat_server.url, "model": "m",
        "apiKeyEnv": "SERVER_SECRET"})  # fmt: skip
    problem(post(server, document), 403)
    time.sleep(0.5)
    assert chat_server.headers == []


def test_allow_base_url_lets_that_endpoint_in_and_no_key_variable(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.reply({"role": "assistant", "content": "hello from the listed endpoint"})
    served = start_serve(str(tmp_path / "s.db"), tmp_path, "--tokens",
                         str(tokens_file(tmp_path)), "--allow-base-url", chat_server.url,
                         env={"SERVER_SECRET": CANARY})  # fmt: skip
    try:
        provider = {"tag": "openaiCompatible", "baseUrl": chat_server.url + "/", "model": "m"}
        made = post(served, {"slug": "listed", "provider": provider})
        assert made.status_code == 201, made.text
        assert made.json()["state"] == "completed"
        other = {**provider, "baseUrl": chat_server.url.replace("/v1", "/v2")}
        assert "is not a model endpoint" in problem(post(served, {"slug": "o", "provider": other}),
                                                    403)  # fmt: skip
        keyed = {**provider, "apiKeyEnv": "SERVER_SECRET"}
        assert "apiKeyEnv" in problem(post(served, {"slug": "k", "provider": keyed}), 403)
    finally:
        assert served.stop() == 0, served.stderr()
    assert len(chat_server.requests) == 1
    assert all(CANARY not in json.dumps(h) for h in chat_server.headers)


def test_the_operators_agent_files_are_not_held_to_the_rules(tmp_path: Path) -> None:
    marker = tmp_path / "ran-from-file"
    agents = tmp_path / "agents"
    agents.mkdir()
    write_json(agents / "local.json", agent(shell(marker)))
    served = start_serve(str(tmp_path / "s.db"), tmp_path, "--tokens",
                         str(tokens_file(tmp_path)), "--agents", str(agents))  # fmt: skip
    try:
        with served.client(TOKEN) as http:
            made = http.post("/v1/sessions", json={"agent": "local.json", "prompt": "go",
                                                   "run": True})  # fmt: skip
        assert made.status_code == 201, made.text
        assert marker.exists()
    finally:
        assert served.stop() == 0, served.stderr()


def test_no_auth_holds_inline_agents_to_the_rules_too(tmp_path: Path) -> None:
    marker = tmp_path / "ran-no-auth"
    served = start_serve(str(tmp_path / "s.db"), tmp_path, "--no-auth")
    try:
        with served.client() as http:
            answer = http.post("/v1/sessions", json={"agent": agent(shell(marker)),
                                                     "prompt": "go", "run": True})  # fmt: skip
        assert "'localProcess' runs" in problem(answer, 403)
    finally:
        assert served.stop(signal.SIGTERM) == 0, served.stderr()
    assert not marker.exists()


def test_trust_inline_agents_lifts_the_rules(tmp_path: Path) -> None:
    """What the option says: a posted agent's program runs on the host."""
    marker = tmp_path / "ran-trusted"
    served = start_serve(str(tmp_path / "s.db"), tmp_path, "--tokens",
                         str(tokens_file(tmp_path)), "--trust-inline-agents")  # fmt: skip
    try:
        made = post(served, agent(shell(marker)))
        assert made.status_code == 201, made.text
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline, served.stderr()
            time.sleep(0.05)
    finally:
        assert served.stop() == 0, served.stderr()


@pytest.mark.parametrize("url", ["ftp://x/v1", "http://u:p@127.0.0.1/v1", "not a url"])
def test_a_bad_allow_base_url_is_one_line_and_exit_2(tmp_path: Path, url: str) -> None:
    from tests.server.test_serve_cli import serve

    done = serve("--store", str(tmp_path / "s.db"), "--no-auth", "--allow-base-url", url,
                 cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("agents-runner: error: --allow-base-url:"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
