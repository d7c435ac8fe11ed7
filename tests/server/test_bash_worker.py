"""examples/workers/claim-worker.sh, the bash + curl + jq external worker, as a real
subprocess against a real server: it long-polls, claims, heartbeats while its handler
runs, completes or fails, and stops on a flag, after N calls, or on a refused token."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import TOKENS, Served
from tests.server.test_flow import start

WORKER = Path(__file__).resolve().parents[2] / "examples" / "workers" / "claim-worker.sh"
BASH = shutil.which("bash") or "/bin/bash"


def worker(served: Served, token: str | None, tools: str, handler: str,
           **settings: str) -> subprocess.Popen[str]:  # fmt: skip
    env = {"PATH": os.environ["PATH"], "AGENTS_RUNNER_URL": served.url, "CLAIM_TOOLS": tools,
           "CLAIM_HANDLER": handler, "CLAIM_WAIT_SECONDS": "2", **settings}  # fmt: skip
    if token is not None:
        env["AGENTS_RUNNER_TOKEN"] = token
    return subprocess.Popen([BASH, str(WORKER)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def finished(process: subprocess.Popen[str]) -> tuple[int, list[dict[str, Any]], str]:
    out, err = process.communicate(timeout=60)
    return process.returncode, [json.loads(line) for line in out.splitlines()], err


def test_the_bash_worker_claims_and_completes(served: Served) -> None:
    session_id, tokens = start(served)
    handler = "jq -c '{type: \"json\", content: {orders: 12, asked: .query, by: env.CLAIM_TOOL}}'"
    process = worker(served, TOKENS["worker-a"], "fetch_remote_a", handler, CLAIM_MAX_CALLS="1")
    code, lines, err = finished(process)
    assert code == 0, err
    [line] = lines
    assert line["outcome"] == "completed" and line["answer"]["status"] == "applied", line
    assert (line["session_id"], line["tool_call_id"]) == (session_id, "call_remote_a")
    call = served.store.load(session_id).calls["call_remote_a"]
    assert call.state == "completed" and call.token == tokens["fetch_remote_a"]
    assert call.result is not None
    assert call.result.content == {"orders": 12, "asked": "orders today", "by": "fetch_remote_a"}
    assert served.store.load(session_id).calls["call_remote_b"].state == "deferred"


def test_the_bash_worker_heartbeats_while_its_handler_runs(served: Served,
                                                           tmp_path: Path) -> None:  # fmt: skip
    session_id, _ = start(served)
    started, go = tmp_path / "started", tmp_path / "go"
    handler = (f"echo \"$CLAIM_LEASE_EXPIRES_MS\" > {started};"
               f" while [ ! -e {go} ]; do sleep 0.05; done; echo '\"slow but sure\"'")  # fmt: skip
    process = worker(served, TOKENS["worker-a"], "fetch_remote_a", handler,
                     CLAIM_MAX_CALLS="1", CLAIM_LEASE_SECONDS="3")  # fmt: skip
    while not started.exists() or not started.read_text().strip():
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    first_expiry = int(started.read_text())
    while served.store.now_ms() <= first_expiry + 500:  # the first lease is long gone
        time.sleep(0.05)
    with served.client() as operator:  # a claim request sweeps lapsed claims first
        swept = operator.post("/v1/claims", json={"tools": ["fetch_remote_a"]})
    assert swept.status_code == 200 and swept.json()["claims"] == []
    # Heartbeats kept the claim: the call was neither released nor moved to unknown_outcome.
    assert served.store.load(session_id).calls["call_remote_a"].state == "deferred"
    go.touch()
    code, [line], err = finished(process)
    assert code == 0 and line["outcome"] == "completed", err
    assert "heartbeat" not in err  # no heartbeat was refused
    call = served.store.load(session_id).calls["call_remote_a"]
    assert call.state == "completed" and call.result is not None
    assert call.result.content == "slow but sure"


def test_a_failing_handler_fails_the_call(served: Served) -> None:
    session_id, _ = start(served)
    process = worker(served, TOKENS["worker-b"], "fetch_remote_b",
                     "echo 'the remote is down' >&2; exit 3", CLAIM_MAX_CALLS="1")  # fmt: skip
    code, [line], err = finished(process)
    assert code == 0 and line["outcome"] == "failed", err
    call = served.store.load(session_id).calls["call_remote_b"]
    assert call.state == "failed" and call.result is not None
    assert "the remote is down" in call.result.content


def test_the_bash_worker_stops_on_its_flag(served: Served, tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    process = worker(served, TOKENS["worker-a"], "fetch_remote_a", "cat",
                     CLAIM_STOP_FILE=str(stop), CLAIM_WAIT_SECONDS="1")  # fmt: skip
    session_id, _ = start(served)
    while served.store.load(session_id).calls["call_remote_a"].state == "deferred":
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    stop.touch()
    code, [line], err = finished(process)
    assert code == 0 and "stopped after 1 call(s)" in err, err
    assert line["outcome"] == "completed"
    call = served.store.load(session_id).calls["call_remote_a"]
    assert call.result is not None and call.result.content == {"query": "orders today"}


@pytest.mark.parametrize(("token", "tools", "why"), [
    ("not-a-token", "fetch_remote_a", "HTTP 401 unauthorized"),
    (TOKENS["worker-b"], "fetch_remote_a", "HTTP 403 forbidden"),
    (TOKENS["viewer"], "fetch_remote_a", "HTTP 403 forbidden"),
])  # fmt: skip
def test_a_refused_token_stops_the_worker(served: Served, token: str, tools: str,
                                          why: str) -> None:  # fmt: skip
    code, lines, err = finished(worker(served, token, tools, "cat"))
    assert code == 2 and why in err and lines == [], err


def test_a_worker_without_tools_is_a_setup_error(served: Served) -> None:
    code, _, err = finished(worker(served, TOKENS["worker-a"], "", "cat"))
    assert code == 1 and "CLAIM_TOOLS" in err
