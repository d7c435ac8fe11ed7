"""The session commands as agents-exe documents them, through the real CLI: one process per
command, a real SQLite file or a file-store directory, the scripted provider or an
OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys

import pytest

from runner.cli.common import run_async, session_engine
from runner.cli.session import auto_resume
from runner.stores import SQLiteStore

CLI = [sys.executable, "-m", "runner.cli"]
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(17)
MIB = 1024 * 1024


def agent(responses: list[dict], **extra: object) -> dict:
    """One deferred tool (remote_a), one that runs here (fetch_local)."""
    return {
        "slug": "exe",
        "executionMode": "asynchronous",
        "provider": {"tag": "scripted", "responses": responses},
        "tools": [{"name": "fetch_local", "parameters": {"type": "object"}},
                  {"name": "remote_a", "kind": "external", "parameters": {"type": "object"}}],
        "toolCallPolicyConfig": {"rules": [{"match": {"tool": "remote_a"}, "disposition": {
            "tag": "defer", "reason": "external worker", **extra}}]},
    }  # fmt: skip


#: Asks for both tools at once, then answers with what remote_a returned, verbatim.
ECHO = agent([
    {"tool_calls": [{"id": "l", "name": "fetch_local", "arguments": {"key": "weather"}},
                    {"id": "a", "name": "remote_a", "arguments": {"q": "x"}}]},
    {"text": "{{result:a}}"},
])  # fmt: skip


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / "exe.json").write_text(json.dumps(ECHO))
    return tmp_path


def cli(workspace, *args: str, code: int = 0, env: dict | None = None):
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=workspace,
                          timeout=120, env={**os.environ, **(env or {})})  # fmt: skip
    assert done.returncode == code, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done


def js(workspace, *args: str) -> dict:
    return json.loads(cli(workspace, *args, "--json").stdout)


def start(workspace, *args: str, store: str = "s.db") -> str:
    out = cli(workspace, "session", "start", "--agent-file", "exe.json", "--prompt", "go",
              "--store", store, *args).stdout  # fmt: skip
    match = re.fullmatch(r"session-id: (s-[0-9a-f-]{36})\n", out)
    assert match, out
    return match.group(1)


def waiting(workspace, store: str = "s.db") -> tuple[str, str]:
    """A session waiting on remote_a (fetch_local ran): (its id, remote_a's token)."""
    sid = start(workspace, store=store)
    report = js(workspace, "session", "resume", sid, "--store", store)
    assert report["status"] == "waiting" and report["ran"] == ["l"]
    return sid, report["deferred_calls"][0]["continuation_token"]


# --- start ---------------------------------------------------------------------------


def test_start_prints_the_session_id_line_and_json_with_json(workspace):
    sid = start(workspace)
    shown = js(workspace, "session", "show", sid, "--store", "s.db")
    assert shown["status"] == "running" and shown["turns"][0]["text"] == "go"
    started = js(workspace, "session", "start", "--agent-file", "exe.json", "--prompt", "go",
                 "--store", "s.db")  # fmt: skip
    assert set(started) == {"session_id", "status"} and started["status"] == "running"
    listed = js(workspace, "session", "list", "--store", "s.db")["sessions"]
    assert {s["id"] for s in listed} == {sid, started["session_id"]}
    stepped = cli(workspace, "session", "start", "--agent-file", "exe.json", "--prompt", "go",
                  "--store", "s.db", "--step").stdout.splitlines()  # fmt: skip
    assert re.fullmatch(r"session-id: s-[0-9a-f-]{36}", stepped[0]) and "is running" in stepped[1]


def test_attached_text_and_image_reach_the_scripted_model(workspace):
    (workspace / "exe.json").write_text(json.dumps(agent([{"text": "saw:\n{{attachments}}"}])))
    (workspace / "notes.md").write_text("# Notes\nthe sky is green")
    (workspace / "pic").write_bytes(PNG)  # no extension: recognised by its bytes
    sid = start(workspace, "--attach", "notes.md", "--attach", "pic")
    final = js(workspace, "session", "resume", sid, "--store", "s.db")
    assert final["final_answer"] == (
        f"saw:\nAttached file notes.md:\n# Notes\nthe sky is green\n[image image/png,"
        f" {len(PNG)} bytes]"
    )
    first = js(workspace, "session", "show", sid, "--store", "s.db")["turns"][0]
    assert [(a["kind"], a["name"], a["mime_type"]) for a in first["attachments"]] == [
        ("text", "notes.md", "text/plain"), ("image", "pic", "image/png")]  # fmt: skip


def test_attachments_go_to_an_openai_compatible_server_as_content_parts(workspace, chat_server):
    document = {"slug": "http", "provider": {"tag": "openaiCompatible", "model": "m-1",
                "baseUrl": chat_server.url, "apiKeyEnv": "H4_TEST_KEY"}}  # fmt: skip
    (workspace / "http.json").write_text(json.dumps(document))
    (workspace / "notes.txt").write_text("remember the milk")
    gif = b"GIF89a" + bytes(20)
    (workspace / "cat.gif").write_bytes(gif)
    chat_server.reply({"role": "assistant", "content": "a cat and some milk"})
    done = cli(workspace, "run", "--agent-file", "http.json", "--prompt", "what is this?",
               "--attach", "cat.gif", "--attach", "notes.txt", "--store", "s.db",
               env={"H4_TEST_KEY": "sk-test"})  # fmt: skip
    assert done.stdout.strip() == "a cat and some milk"
    (request,) = chat_server.requests
    assert request["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url",
         "image_url": {"url": "data:image/gif;base64," + base64.b64encode(gif).decode()}},
        {"type": "text", "text": "Attached file notes.txt:\nremember the milk"},
    ]}]  # fmt: skip


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"blob.bin": b"\x00\xff\xfe binary"}, "blob.bin: neither an image (PNG, JPEG, GIF,"
         " WebP) nor UTF-8 text"),
        ({"fake.png": b"just words"}, "fake.png: named like image/png but its bytes are not"),
        ({"big.png": PNG + bytes(5 * MIB)}, "big.png: 5.0 MiB is over the 5.0 MiB limit for"
         " an image"),
        ({"big.txt": b"x" * (MIB + 1)}, "big.txt: 1.0 MiB is over the 1.0 MiB limit for a"
         " text file"),
        ({f"p{i}.png": PNG + bytes(4 * MIB) for i in range(5)}, "p4.png: the attachments come"
         " to 20.0 MiB with it, over the 20.0 MiB limit"),
        ({}, "missing.txt: cannot attach it: it does not exist"),
    ],
)  # fmt: skip
def test_an_attachment_that_cannot_go_is_refused_by_name_and_nothing_is_stored(
    workspace, files, message
):
    for name, data in files.items():
        (workspace / name).write_bytes(data)
    names = [a for name in (list(files) or ["missing.txt"]) for a in ("--attach", name)]
    done = cli(workspace, "session", "start", "--agent-file", "exe.json", "--prompt", "go",
               "--store", "s.db", *names, code=2)  # fmt: skip
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (workspace / "s.db").exists() or not js(
        workspace, "session", "list", "--store", "s.db")["sessions"]  # fmt: skip


# --- pause, freeze, pending ----------------------------------------------------------


def test_pause_runs_one_step_and_prints_the_tokens_when_the_turn_yields(workspace):
    sid = start(workspace)
    first = cli(workspace, "session", "pause", sid, "--store", "s.db").stdout
    # The model's turn: remote_a is deferred already, fetch_local not yet run.
    (token,) = re.findall(r"^token: (\S+) \(remote_a\)$", first, re.MULTILINE)
    assert f"session {sid} is running" in first
    second = cli(workspace, "session", "pause", sid, "--store", "s.db").stdout
    assert "(the turn yielded)" in second and "ran: l" in second
    assert re.findall(r"^token: (\S+) \(remote_a\)$", second, re.MULTILINE) == [token]
    pending = js(workspace, "session", "pending", sid, "--store", "s.db")["calls"]
    assert [p["continuation_token"] for p in pending] == [token]
    again = js(workspace, "session", "pause", sid, "--store", "s.db")
    assert again["status"] == "waiting" and again["continuation_tokens"] == [token]


def test_freeze_stops_a_session_until_resume(workspace):
    sid = start(workspace)
    assert js(workspace, "session", "freeze", sid, "--store", "s.db")["status"] == "frozen"
    assert "is frozen" in cli(workspace, "session", "pause", sid, "--store", "s.db",
                              code=2).stderr  # fmt: skip
    assert js(workspace, "session", "resume", sid, "--store", "s.db")["status"] == "waiting"


def test_pending_shows_tool_call_id_token_and_disposition(workspace):
    sid, token = waiting(workspace)
    human = cli(workspace, "session", "pending", sid, "--store", "s.db").stdout
    assert human.splitlines() == ["  call a: remote_a", f"    token: {token}",
                                  "    disposition: defer (external worker)",
                                  "    state: deferred"]  # fmt: skip
    (entry,) = js(workspace, "session", "pending", sid, "--store", "s.db")["calls"]
    assert entry["tool"] == "remote_a" and entry["tool_call_id"] == "a"
    assert entry["continuation_token"] == token and entry["state"] == "deferred"
    assert entry["disposition"]["tag"] == "defer"
    assert entry["disposition"]["reason"] == "external worker"
    assert entry["call"] == {"id": "a", "name": "remote_a", "arguments": {"q": "x"}}
    assert "expired" not in entry


def test_pending_reports_an_overdue_deferred_call_as_expired_before_anyone_holds_it(workspace):
    (workspace / "exe.json").write_text(json.dumps(
        agent(ECHO["provider"]["responses"], expiresAfterSeconds=0.001)))  # fmt: skip
    sid = start(workspace)
    cli(workspace, "session", "pause", sid, "--store", "s.db")  # the model's turn: deferred
    store = SQLiteStore(workspace / "s.db")
    try:
        assert store.load(sid).call("a").state == "deferred"  # nobody has expired it
    finally:
        store.close()
    (entry,) = [p for p in js(workspace, "session", "pending", sid, "--store", "s.db")["calls"]
                if p["tool"] == "remote_a"]  # fmt: skip
    assert entry["state"] == "expired" and entry["expired"] is True
    human = cli(workspace, "session", "pending", sid, "--store", "s.db").stdout
    assert "state: expired (overdue" in human


# --- complete ------------------------------------------------------------------------

TINY_PNG = base64.b64encode(PNG).decode()


@pytest.mark.parametrize(
    ("content", "seen"),
    [
        ('{"type":"text","content":"42"}', "42"),
        ('{"type":"text","text":"42"}', "42"),
        ('{"type":"json","content":{"rows":3}}', {"rows": 3}),
        ('{"type":"json","content":"a string"}', "a string"),
        (json.dumps({"type": "media", "mimeType": "image/png", "base64Data": TINY_PNG,
                     "filename": "p.png"}),
         {"type": "media", "mime_type": "image/png", "base64_data": TINY_PNG,
          "filename": "p.png"}),
        (json.dumps({"type": "media", "mime_type": "image/png", "base64_data": TINY_PNG}),
         {"type": "media", "mime_type": "image/png", "base64_data": TINY_PNG}),
        (json.dumps({"type": "mixed", "parts": [
            {"type": "text", "text": "see"},
            {"type": "media", "mimeType": "image/png", "base64Data": TINY_PNG}]}),
         {"type": "mixed", "parts": [
             {"type": "text", "content": "see"},
             {"type": "media", "mime_type": "image/png", "base64_data": TINY_PNG}]}),
        ('{"rows": 3, "type": "table"}', {"rows": 3, "type": "table"}),
        ("[1, 2]", [1, 2]),
        ("42\n", 42),
        ("forty-two\n", "forty-two"),
        ('{"kind": "ToolCallResult", "version": "1.0", "id": "a", "status": "ok",'
         ' "output": {"type": "text", "content": "from an envelope"}}', "from an envelope"),
    ],
)  # fmt: skip
def test_complete_resume_hands_the_model_what_the_file_means(workspace, content, seen):
    sid, token = waiting(workspace)
    (workspace / "result").write_text(content)
    done = js(workspace, "session", "complete", token, "result", "--resume", "--store", "s.db")
    assert done["applied"] == [token] and done["continued_by"] is None
    resumed = done["resumed"]
    assert resumed["status"] == "completed" and resumed["session_id"] == sid
    answer = resumed["final_answer"]
    assert (answer if isinstance(seen, str) else json.loads(answer)) == seen


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"type":"text","content":5}', "a text response needs `content`, a string"),
        ('{"type":"media","mimeType":"image/png"}', "a media response needs `base64_data`"),
        ('{"type":"media","mimeType":"image/png","base64Data":"not base64!"}',
         "result.base64_data"),
        ('{"type":"text","content":"x","extra":1}', "has no field 'extra'"),
        ('{"type":"mixed","parts":[{"type":"video"}]}', "result.parts[0]: expected an object"),
        ('{"type":"json"}', "a json response needs `content`"),
    ],
)  # fmt: skip
def test_a_malformed_user_tool_response_is_a_clear_error(workspace, content, message):
    sid, token = waiting(workspace)
    (workspace / "result").write_text(content)
    done = cli(workspace, "session", "complete", token, "result", "--store", "s.db", code=2)
    assert "not a valid UserToolResponse" in done.stderr and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    (entry,) = js(workspace, "session", "pending", sid, "--store", "s.db")["calls"]
    assert entry["state"] == "deferred"  # nothing applied


def test_complete_without_resume_leaves_the_session_to_a_later_resume(workspace):
    sid, token = waiting(workspace)
    (workspace / "r.txt").write_text("later")
    done = js(workspace, "session", "complete", token, "r.txt", "--store", "s.db")
    assert done["status"] == "running" and "resumed" not in done
    assert js(workspace, "session", "resume", sid, "--store", "s.db")["final_answer"] == "later"


def test_resume_after_complete_leaves_a_session_held_by_a_live_process_to_it(workspace):
    """What `complete --resume` does once the result is in: a live holder (a worker that
    took the now-due session first) continues it; once free, this process does."""
    sid, token = waiting(workspace)
    (workspace / "r.txt").write_text("42")
    assert js(workspace, "session", "complete", token, "r.txt", "--store", "s.db")["status"] == (
        "running")  # fmt: skip
    store = SQLiteStore(workspace / "s.db")
    try:
        lease = store.acquire_lease(sid, "worker-7", 300)
        assert lease is not None
        engine = session_engine(store)
        assert run_async(auto_resume, engine, sid) == (None, "worker-7")
        assert store.load(sid).status == "running"  # untouched: worker-7 continues it
        store.release_lease(lease)
        report, holder = run_async(auto_resume, engine, sid)
        assert holder is None and report is not None and report.session.final_answer == "42"
    finally:
        store.close()


def test_fail_resume_reaches_the_final_answer_with_the_reason(workspace):
    _, token = waiting(workspace)
    done = js(workspace, "session", "fail", token, "--reason", "A is down", "--resume",
              "--store", "s.db")  # fmt: skip
    assert done["resumed"]["final_answer"] == "[error TOOL_FAILED] A is down"


# --- stores --------------------------------------------------------------------------


@pytest.mark.parametrize("location", ["sessions", "file:sessions"])
def test_the_walkthrough_on_a_file_store_directory(workspace, location):
    (workspace / "sessions").mkdir()
    sid, token = waiting(workspace, store=location)
    pending = js(workspace, "session", "pending", sid, "--store", location)["calls"]
    assert [p["continuation_token"] for p in pending] == [token]
    (workspace / "r.json").write_text('{"type":"json","content":{"ok":true}}')
    js(workspace, "session", "complete", token, "r.json", "--store", location)
    final = js(workspace, "session", "resume", sid, "--store", location)
    assert final["status"] == "completed" and json.loads(final["final_answer"]) == {"ok": True}
    assert (workspace / "sessions" / "sessions" / f"{sid}.json").exists()
    assert not (workspace / "s.db").exists() and not (workspace / "file:sessions").exists()
    listed = js(workspace, "session", "list", "--store", location)["sessions"]
    assert [s["id"] for s in listed] == [sid]
    shown = js(workspace, "session", "show", sid, "--store", location)
    assert shown["status"] == "completed" and shown["late_results"] == []


def test_complete_resume_on_a_file_store_continues_in_process(workspace):
    (workspace / "sessions").mkdir()
    _, token = waiting(workspace, store="sessions")
    (workspace / "r.txt").write_text("done here")
    done = js(workspace, "session", "complete", token, "r.txt", "--resume", "--store",
              "sessions")  # fmt: skip
    assert done["resumed"]["final_answer"] == "done here"


@pytest.mark.parametrize("location", ["sessions", "file:sessions"])
def test_the_worker_refuses_a_store_without_leases_and_says_why(workspace, location):
    (workspace / "sessions").mkdir()
    done = cli(workspace, "worker", "--store", location, "--exit-when-idle", code=2)
    assert "needs a store with leases with fencing tokens" in done.stderr
    assert "file store sessions" in done.stderr and "Use an SQLite store" in done.stderr


def test_an_unreachable_postgresql_store_is_named_without_its_password(workspace):
    # Port 1 on loopback: refused at once, and no lookup leaves the machine.
    url = "postgresql://me:hunter2@127.0.0.1:1/x"
    done = cli(workspace, "session", "list", "--store", url, code=1)
    assert "cannot connect to postgresql://me:***@127.0.0.1:1/x" in done.stderr
    assert "Connection refused" in done.stderr and "hunter2" not in done.stderr
