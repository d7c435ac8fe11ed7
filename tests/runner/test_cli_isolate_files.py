"""`agents-runner isolate --file/--collect/--out/--stream` in a real subprocess, with the
1.1 test worker (tests/workers/events_worker.py); and `--out`'s writer on its own, fed
names no runner would pass (it must hold even so)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envelopes import codec
from envelopes.v1 import MediaOutput, MixedOutput, TextOutput, ToolCallResult
from runner.cli.transfer import write_returned
from runner.isolation import CallOutcome
from tests.conftest import REPO, WORKERS, make_request

CLI = [sys.executable, "-m", "runner.cli"]
EVENTS_WORKER = str(WORKERS / "events_worker.py")


def isolate(*options: str, mode: tuple[str, ...] = ("ok",), stdin: bytes | None = None,
            cwd: Path = REPO) -> subprocess.CompletedProcess[str]:  # fmt: skip
    args = [*CLI, "isolate", "--runner", "local", *options, "--", sys.executable,
            EVENTS_WORKER, *mode]  # fmt: skip
    data = codec.encode(make_request("run")) if stdin is None else stdin
    done = subprocess.run(args, input=data, capture_output=True, cwd=cwd, timeout=60)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                       done.stderr.decode())  # fmt: skip


def test_stream_prints_each_event_on_one_escaped_line():
    done = isolate("--stream", mode=("lines", "3", "0.2"))
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert [line.split(":")[0] for line in lines] == [f"[{i}] log stdout" for i in (1, 2, 3)]
    control = isolate("--stream", mode=("control",))
    assert "\x1b" not in control.stderr and "\u202e" not in control.stderr
    assert "[1] log stdout: red \\x1b[31malert" in control.stderr


def test_without_stream_no_event_is_printed_and_json_carries_them():
    quiet = isolate(mode=("lines", "2", "0"))
    assert quiet.returncode == 0 and "[1]" not in quiet.stderr
    full = isolate("--stream", "--json", mode=("lines", "2", "0"))
    outcome = json.loads(full.stdout)
    assert [e["seq"] for e in outcome["events"]] == [1, 2]
    assert outcome["events_dropped"] == 0 and outcome["events_invalid"] == 0


def test_file_sends_text_and_binary_files(tmp_path: Path):
    text, blob = tmp_path / "in.csv", tmp_path / "blob.bin"
    text.write_text("a,b\n1,2\n")
    blob.write_bytes(b"\x00\xff\x01")
    done = isolate("--file", f"{text}:data/in.csv", "--file", str(blob))
    assert done.returncode == 0, done.stderr
    parts = json.loads(done.stdout)["output"]["parts"]
    assert [(p["path"], base64.b64decode(p["base64_data"])) for p in parts[1:]] == [
        ("data/in.csv", b"a,b\n1,2\n"), ("blob.bin", b"\x00\xff\x01")
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--file", "x:../escape"], "the path in the workspace has a '..' component"),
        (["--file", "x:/abs"], "is absolute"),
        (["--file", "/no/such/file"], "cannot read /no/such/file"),
        (["--collect", "*.png"], "--collect needs --out DIR"),
        (["--collect", "[ab].png", "--out", "o"], "bracket"),
    ],
)
def test_bad_file_options_exit_2_with_one_line(options, message, tmp_path: Path):
    done = isolate(*options, cwd=tmp_path)
    assert done.returncode == 2, done
    assert message in done.stderr and "Traceback" not in done.stderr


def test_out_writes_collected_files_under_dir_and_never_through_a_symlink(tmp_path: Path):
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (outside / "victim.txt").write_text("keep")
    os.symlink(outside, out / "linked")  # a directory link planted in DIR
    os.symlink(outside / "victim.txt", out / "leaf.txt")  # a file link planted in DIR
    names = ["linked/victim.txt", "linked/new.txt", "leaf.txt", "fine/report.txt"]
    done = isolate("--collect", "**", "--out", str(out), mode=("media", json.dumps(names)))
    assert done.returncode == 1, done.stderr  # some names were refused
    assert "refused output.parts[1] 'linked/victim.txt': linked is a symbolic link" in done.stderr
    assert "refused output.parts[2] 'linked/new.txt'" in done.stderr
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert (outside / "victim.txt").read_text() == "keep"
    # The planted file link is left alone (it exists: no --overwrite), its target too.
    assert (out / "leaf.txt").is_symlink() and (outside / "victim.txt").read_text() == "keep"
    assert "refused output.parts[3] 'leaf.txt': already exists" in done.stderr
    assert (out / "fine" / "report.txt").read_text() == "hi"
    assert f"wrote {out / 'fine' / 'report.txt'} (2 bytes)" in done.stderr
    # With --overwrite the link itself is replaced by the file, never its target.
    again = isolate("--collect", "leaf.txt", "--overwrite", "--out", str(out),
                    mode=("media", json.dumps(["leaf.txt"])))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert not (out / "leaf.txt").is_symlink() and (out / "leaf.txt").read_text() == "hi"
    assert (outside / "victim.txt").read_text() == "keep"


def test_files_to_a_worker_without_files_are_refused(tmp_path: Path):
    (tmp_path / "in.txt").write_text("x")
    done = isolate("--file", str(tmp_path / "in.txt"), mode=("--caps=events", "ok"))
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["code"] == "INVALID_REQUEST"


def hostile_outcome(*names: str) -> CallOutcome:
    """An outcome holding names no runner lets through (built without the model's
    checks): the writer must refuse them on its own."""
    parts = [TextOutput(content="x")]
    for name in names:
        media = MediaOutput.model_construct(
            type="media", mime_type="text/plain", base64_data="aGk=", filename=None, path=name
        )
        parts.append(media)
    output = MixedOutput.model_construct(type="mixed", parts=parts)
    result = ToolCallResult.model_construct(kind="ToolCallResult", version="1.1", id="c",
                                            status="ok", output=output, error=None)  # fmt: skip
    return CallOutcome(result, 0, None, 1.0, 0, 0, False, False, "", {})


@pytest.mark.parametrize(
    "name",
    ["../escape.txt", "/tmp/abs.txt", "a/../../escape.txt", "nul\x00.txt", "back\\..\\x",
     "esc\x1b.txt", "bidi\u202e.txt", ""],
)  # fmt: skip
def test_the_out_writer_refuses_what_no_runner_would_pass(name, tmp_path: Path, capsys):
    out = tmp_path / "deep" / "out"
    assert write_returned(hostile_outcome(name, "ok.txt"), out, ["**"]) is False
    assert (out / "ok.txt").read_text() == "hi"
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["deep/out/ok.txt"]
    assert "refused output.parts[1]" in capsys.readouterr().err


def test_the_out_writer_refuses_case_folded_duplicates(tmp_path: Path, capsys):
    assert write_returned(hostile_outcome("Report.txt", "report.TXT"), tmp_path, ["*"]) is False
    assert [p.name for p in tmp_path.iterdir()] == ["Report.txt"]
    assert "the same path as output.parts[1]" in capsys.readouterr().err
