"""Issue 23 finding 6 and issue 24 item 3: nothing a sandbox, a worker, a model or a person
wrote reaches the operator's terminal as a control sequence, or as rich markup.

HOSTILE (tests/security/hostile_text_worker.py) holds ESC sequences (CSI colours, an OSC
window title), C1 controls (CSI, OSC, ST), BEL, DEL, bidi overrides, and rich markup. It
goes through every channel: a worker's result text, its stderr, its events, its error
message, a file name, a failed describe, the model's text and the user's prompt, a
person's `session fail` reason, runner_info and the egress proxy's refusals (Docker);
out through every printer: `isolate` (plain, `--json`, `--stream`), `describe`, `run`,
`session show` (text, on a terminal, `--json`), `session resume`, `worker-check`'s table,
the log lines. None may carry a raw control character, and markup stays verbatim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import docker
import pytest

from runner.cli.check import print_table as print_check_table
from runner.cli.transfer import write_returned
from runner.conformance import Report
from runner.isolation.containers import labels_for
from runner.isolation.egress import EGRESS_NETWORK_ENV, EGRESS_PROXY_IMAGE
from tests.conftest import REPO, make_request
from tests.runner.test_cli_isolate_files import hostile_outcome
from tests.security.hostile_text_worker import HOSTILE
from tests.terminal import RICH_STYLE, in_terminal

CLI = [sys.executable, "-m", "runner.cli"]
WORKER = str(Path(__file__).with_name("hostile_text_worker.py"))
BASH_IMAGE = "agents-runner/bash-runner:latest"
#: What must never arrive raw: ESC, BEL, DEL, C1 CSI/OSC/ST, bidi overrides.
RAW = ("\x1b", "\x07", "\x7f", "\x9b", "\x9d", "\x9c", "\u202e", "\u2066")
MARKUP = "[bold red]ALERT[/bold red] [error X] visible?"


def assert_inert(text: str, where: str) -> None:
    found = [ch for ch in RAW if ch in text]
    assert not found, f"{where}: raw {found!r} in {text!r}"


def cli(*args: str, cwd: Path = REPO, code: int | None = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*CLI, *args], capture_output=True, cwd=cwd, timeout=120)
    out = subprocess.CompletedProcess(done.args, done.returncode,
                                      done.stdout.decode("utf-8", "replace"),
                                      done.stderr.decode("utf-8", "replace"))  # fmt: skip
    assert code is None or out.returncode == code, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert_inert(out.stdout, f"stdout of {args[:2]}")
    assert_inert(out.stderr, f"stderr of {args[:2]}")
    return out


def spec(mode: str) -> dict:
    argv = [sys.executable, "-S", WORKER, mode]
    return {"tag": "runIsolated", "spec": {"tag": "localProcess", "argv": argv}}


def agent(tmp_path: Path, responses: list[dict], rules: list[dict], tools: list[dict]) -> Path:
    doc = {"slug": "hostile", "executionMode": "asynchronous",
           "provider": {"tag": "scripted", "responses": responses},
           "tools": tools, "toolCallPolicyConfig": {"rules": rules}}  # fmt: skip
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(doc))
    return path


BUILTIN = {"type": "object"}
ISOLATED_TOOLS = [{"name": "say", "kind": "builtin", "parameters": BUILTIN},
                  {"name": "oops", "kind": "builtin", "parameters": BUILTIN}]  # fmt: skip
ISOLATED_RULES = [{"match": {"tool": "say"}, "disposition": spec("ok")},
                  {"match": {"tool": "oops"}, "disposition": spec("error")}]  # fmt: skip


# --- one call through `isolate` and `describe` -----------------------------------------


def test_isolate_escapes_the_result_stderr_events_and_error_message(tmp_path: Path):
    request = tmp_path / "request.json"
    request.write_text(make_request("say", seconds=60).model_dump_json())
    for mode in ("ok", "error"):
        for options in ((), ("--json",), ("--json", "--stream")):
            done = cli("isolate", "--runner", "local", "--request", str(request), *options,
                       "--", sys.executable, WORKER, mode, code=None)  # fmt: skip
            assert done.returncode == (0 if mode == "ok" else 1), done.stderr
            document = json.loads(done.stdout)
            result = document["result"] if options else document
            said = result["output"]["content"] if mode == "ok" else result["error"]["message"]
            assert said == HOSTILE  # the data intact, read back from its escapes
            if "--stream" in options:
                assert "[1] log stdout: " + MARKUP in done.stderr
                assert "\\x1b]0;pwned-title\\x07" in done.stderr


def test_a_failed_describe_quotes_the_workers_stderr_escaped():
    done = cli("describe", "--runner", "local", "--", sys.executable, WORKER, "baddescribe",
               code=1)  # fmt: skip
    assert "describe failed" in done.stderr and "\\x1b[31mred" in done.stderr


def test_out_names_hostile_file_names_escaped(tmp_path: Path, capsys):
    name = "x\x1b]0;t\x07\x9b\u202e.txt"
    assert write_returned(hostile_outcome(name), tmp_path, ["**"]) is False
    err = capsys.readouterr().err
    assert "refused output.parts[1]" in err
    assert_inert(err, "--out refusals")


def test_the_worker_check_table_shows_a_workers_words_as_text(capsys):
    report = Report("hostile")
    report.add("describe.valid", "fail", HOSTILE)
    print_check_table(report)
    out = capsys.readouterr().out
    assert_inert(out, "worker-check table")
    assert MARKUP in out


# --- sessions: run, session show/fail/resume, a terminal ------------------------------


def test_run_prints_the_final_answer_as_text(tmp_path: Path):
    responses = [{"tool_calls": [{"id": "c", "name": "say", "arguments": {}}]},
                 {"text": "said: {{result:c}} and " + HOSTILE}]  # fmt: skip
    path = agent(tmp_path, responses, ISOLATED_RULES, ISOLATED_TOOLS)
    done = cli("run", "--agent-file", str(path), "--prompt", "go", cwd=tmp_path)
    assert done.stdout.count(MARKUP) == 2, done.stdout
    assert "\\x1b[31mred" in done.stdout and "\\x9b32mgreen" in done.stdout
    assert "\\u202eevil" in done.stdout


def test_session_show_keeps_every_channel_inert_and_every_bracket(tmp_path: Path):
    tools = [*ISOLATED_TOOLS,
             {"name": "remote", "kind": "external", "parameters": BUILTIN}]  # fmt: skip
    rules = [
        *ISOLATED_RULES,
        {"match": {"tool": "remote"}, "disposition": {"tag": "defer", "reason": HOSTILE}},
    ]
    responses = [
        {"text": "thinking " + HOSTILE, "tool_calls": [
            {"id": "c", "name": "say", "arguments": {}},
            {"id": "e", "name": "oops", "arguments": {}},
            {"id": "r", "name": "remote", "arguments": {}}]},
        {"text": "done: {{result:c}} / {{result:e}} / {{result:r}}"},
    ]  # fmt: skip
    path = agent(tmp_path, responses, rules, tools)
    paused = json.loads(cli("run", "--agent-file", str(path), "--prompt", HOSTILE,
                            cwd=tmp_path).stdout)  # fmt: skip
    sid = paused["session_id"]
    token = next(c["continuation_token"] for c in paused["deferred_calls"])
    failed = cli("session", "fail", token, "--reason", "system B is down", cwd=tmp_path)
    assert "recorded the result" in failed.stdout
    resumed = cli("session", "resume", sid, cwd=tmp_path)
    assert MARKUP in resumed.stdout and "[error TOOL_FAILED] system B is down" in resumed.stdout
    pending = cli("session", "pending", sid, cwd=tmp_path)
    assert "No pending calls" in pending.stdout

    shown = cli("session", "show", sid, cwd=tmp_path).stdout
    assert "[error TOOL_FAILED] system B is down" in shown  # our own words, whole
    assert f"[error TOOL_FAILED] {MARKUP}" in shown  # a worker's error message
    assert f"user: {MARKUP}" in shown and f"llm: thinking {MARKUP}" in shown
    assert f"stdout| {MARKUP}" in shown  # its events
    assert shown.count(MARKUP) >= 5

    document = cli("session", "show", sid, "--json", cwd=tmp_path)
    parsed = json.loads(document.stdout)
    assert parsed["turns"][0]["text"] == HOSTILE  # intact in the data, escaped in the text

    code, screen = in_terminal([*CLI, "session", "show", sid], tmp_path)
    assert code == 0, screen
    assert_inert(RICH_STYLE.sub("", screen), "session show on a terminal")
    assert "[error TOOL_FAILED] system B is" in RICH_STYLE.sub("", screen)


def test_log_lines_and_error_messages_are_escaped(tmp_path: Path):
    """A failing session's reason (the model's words) in `fail`'s line on stderr."""
    responses = [{"tool_calls": [{"id": "c", "name": "ghost" + HOSTILE, "arguments": {}}]}]
    path = agent(tmp_path, responses, ISOLATED_RULES, ISOLATED_TOOLS)
    done = cli("run", "--agent-file", str(path), "--prompt", "go", cwd=tmp_path, code=None)
    assert done.stdout or done.stderr  # whatever it says, it says it inert


# --- Docker: runner_info and the egress proxy's refusals -------------------------------

PROBE = r"""python3 - <<'PY'
import os, socket, struct
host, _, port = os.environ["HTTP_PROXY"][len("http://"):].partition(":")
target = b"evil\x1b[31m\x9d0;pwned\x07\x9b31m\xe2\x80\xae.test:443"
try:
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target + b"\r\n\r\n")
    s.recv(4096)
except OSError as exc:
    print("http", exc)
label = b"dns\x1b[31mred"
query = struct.pack("!6H", 7, 0x0100, 1, 0, 0, 0) + bytes([len(label)]) + label
query += b"\x04test\x00" + struct.pack("!HH", 1, 1)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(3)
try:
    u.sendto(query, (host, 53))
    u.recv(512)
except OSError as exc:
    print("dns", exc)
PY
"""


@pytest.mark.docker
@pytest.mark.skipif(os.environ.get("AGENTS_RUNNER_SKIP_DOCKER") == "1", reason="no Docker")
def test_egress_refusals_and_runner_info_reach_isolate_escaped(tmp_path: Path):
    api = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
    api.inspect_image(EGRESS_PROXY_IMAGE)
    network = f"escape-test-{uuid.uuid4().hex[:8]}"
    api.create_network(network, driver="bridge", internal=True,
                       labels=labels_for("egress-test", role="test-network"))  # fmt: skip
    try:
        request = make_request("bash", {"script": PROBE}, seconds=90)
        done = subprocess.run(
            [*CLI, "isolate", "--runner", "docker", "--image", BASH_IMAGE,
             "--egress-allow", "allowed.test:80", "--json"],
            input=request.model_dump_json().encode(), capture_output=True, timeout=180,
            cwd=REPO, env={**os.environ, EGRESS_NETWORK_ENV: network},
        )  # fmt: skip
    finally:
        api.remove_network(network)
    stdout, stderr = done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
    assert done.returncode == 0, stderr
    assert_inert(stdout, "isolate --json with egress refusals")
    assert_inert(stderr, "isolate's stderr with egress refusals")
    outcome = json.loads(stdout)
    assert outcome["runner"]["egress_denied_count"] >= 1, outcome["runner"]
    assert "egress denied" in stderr  # each refusal named, escaped
