"""Issue 24 item 4: tables never cut what people copy. `session list`, `session show`,
`audit` and the demo's tables, piped (plain space-aligned rows) and on a real 80-column
terminal (a pty): every identifier whole on one line, no `…`, and the demo's results
whole (it once showed `"stdout_bytes": 2` for 27), its final answer with every line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import make_request
from tests.terminal import RICH_STYLE, in_terminal

CLI = [sys.executable, "-m", "runner.cli"]
WORKER = str(Path(__file__).resolve().parents[1] / "security" / "hostile_text_worker.py")
SESSION = "s-402ece2d-f02b-4bbe-80df-623c4a5b6c7d"
AGENT = {
    "slug": "a-rather-long-agent-slug-for-the-table",
    "executionMode": "asynchronous",
    "provider": {"tag": "scripted", "responses": [{"text": "hello"}]},
    "tools": [],
    "toolCallPolicyConfig": {"default": {"tag": "runSync"}},
}


def cli(cwd: Path, *args: str) -> str:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def on_terminal(cwd: Path, *args: str) -> str:
    code, screen = in_terminal([*CLI, *args], cwd, columns=80)
    assert code == 0, screen
    return RICH_STYLE.sub("", screen)


def sessions(tmp_path: Path, count: int = 2) -> list[str]:
    (tmp_path / "agent.json").write_text(json.dumps(AGENT))
    return [json.loads(cli(tmp_path, "session", "start", "--agent-file", "agent.json",
                           "--prompt", "hi", "--json"))["session_id"]
            for _ in range(count)]  # fmt: skip


def test_session_list_piped_is_plain_rows_with_whole_ids(tmp_path: Path):
    ids = sessions(tmp_path)
    out = cli(tmp_path, "session", "list")
    lines = out.splitlines()
    assert re.split(r"\s{2,}", lines[0]) == ["session", "status", "conditions", "agent", "version"]
    for sid in ids:
        row = next(line for line in lines if line.startswith(sid + " "))
        assert AGENT["slug"] in row
    assert "…" not in out and "┃" not in out and len(lines) == 3


def test_session_list_and_show_on_an_80_column_terminal_keep_ids_whole(tmp_path: Path):
    ids = sessions(tmp_path)
    screen = on_terminal(tmp_path, "session", "list")
    assert "…" not in screen
    for sid in ids:
        assert any(sid in line for line in screen.splitlines()), screen
    shown = on_terminal(tmp_path, "session", "show", ids[0])
    assert ids[0] in shown and "…" not in shown


def test_the_audit_table_keeps_times_ids_and_outcomes_whole(tmp_path: Path):
    audit = tmp_path / "audit.jsonl"
    request = make_request("say", seconds=60).to_wire()
    request["context"] = {"session_id": SESSION, "call_id": "call-with-a-long-identifier-0123"}
    done = subprocess.run([*CLI, "isolate", "--runner", "local", "--audit", f"file:{audit}",
                           "--", sys.executable, WORKER, "crash"],
                          input=json.dumps(request), capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)  # fmt: skip
    assert done.returncode == 1 and "WORKER_CRASHED" in done.stdout, done.stderr
    record = json.loads(audit.read_text().splitlines()[-1])
    started = record["at"].replace("T", " ")[:19]
    for out in (cli(tmp_path, "audit", "--file", str(audit)),
                on_terminal(tmp_path, "audit", "--file", str(audit))):  # fmt: skip
        row = next(line for line in out.splitlines() if line.startswith(started))
        assert SESSION in row and "call-with-a-long-identifier-0123" in row, out
        assert "WORKER_CRASHED" in row, out
        assert "…" not in out


def test_the_demo_shows_results_and_the_final_answer_whole(tmp_path: Path):
    store = str(tmp_path / "demo.db")
    for out in (cli(tmp_path, "demo", "--runner", "local", "--store", store),
                on_terminal(tmp_path, "demo", "--runner", "local", "--store", store)):  # fmt: skip
        sid = re.search(r"session (s-[0-9a-f-]{36}) waits on", out)
        assert sid is not None, out
        shown = json.loads(cli(tmp_path, "session", "show", sid.group(1), "--store", store,
                               "--json"))  # fmt: skip
        answer = shown["final_answer"]
        final = out[out.index("── final answer ──") :]
        for line in answer.splitlines():
            assert line in final, (line, final)  # no line of the answer cropped
        stdout_bytes = re.findall(r'"stdout_bytes": (\d+)', out)
        expected = re.findall(r'"stdout_bytes": (\d+)', answer)
        assert len(expected) == 1 and set(stdout_bytes) == set(expected), out
