"""The `agents-runner` command in a real subprocess: outputs, exit statuses, and one-line
errors for bad input (never a traceback)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import time

import pytest

from envelopes import codec
from tests.conftest import MISBEHAVE, REPO, make_request

CLI = [sys.executable, "-m", "runner.cli"]


def agents_runner(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, cwd=REPO, timeout=60)


def local(mode: str, *options: str) -> list[str]:
    return ["isolate", "--runner", "local", *options, "--", sys.executable, str(MISBEHAVE), mode]


def test_isolate_local_prints_the_result_and_exits_0():
    done = agents_runner(*local("ok"), stdin=codec.encode(make_request()))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "ok"


def test_isolate_error_result_exits_1_and_json_gives_the_outcome():
    done = agents_runner(*local("exit3", "--json"), stdin=codec.encode(make_request()))
    assert done.returncode == 1
    outcome = json.loads(done.stdout)
    assert outcome["result"]["error"]["code"] == "WORKER_CRASHED"
    assert outcome["exit_code"] == 3 and "duration_ms" in outcome


def test_timeout_option_replaces_the_deadline():
    started = time.monotonic()
    done = agents_runner(*local("never_exits", "--timeout", "1"),
                         stdin=codec.encode(make_request(seconds=600)))  # fmt: skip
    assert json.loads(done.stdout)["error"]["code"] == "WORKER_TIMEOUT"
    assert time.monotonic() - started < 8


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (local("ok"), b"", "empty input"),
        (local("ok"), b'{"kind": "ToolCallRequest"', "invalid JSON at line 1"),
        (local("ok"), b'{"kind":"ToolCallRequest","version":"1.0","id":"x"}', "tool"),
        (local("ok"), b'{"kind":"ToolCallRequest","version":"3.0"}', "not supported"),
        (["isolate", "--runner", "docker"], b"{}", "--image"),
        (["isolate", "--runner", "local"], b"{}", "argv"),
        (["isolate", "--runner", "podman", "--", "x"], b"{}", "'local' or 'docker'"),
        (local("ok", "--cpus", "2"), b"{}", "--cpus applies to --runner docker only"),
        (["isolate", "--runner", "docker", "--image", "x", "--memory", "lots"], b"{}", "--memory"),
        (local("ok", "--request", "/nonexistent.json"), b"", "cannot read /nonexistent.json"),
    ],
)
def test_bad_input_gets_one_clear_line(args, stdin, message):
    done = agents_runner(*args, stdin=stdin)
    assert done.returncode == 2
    err = done.stderr.decode()
    assert message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_describe_local():
    done = agents_runner("describe", "--runner", "local", "--env", f"PYTHONPATH={REPO}", "--",
                         sys.executable, str(REPO / "images/bash-runner/worker.py"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tools"][0]["name"] == "bash"


# --- a request that does not go stale, and one command without JSON (issue 24, item 1) ---

BASH_WORKER = ["--env", f"PYTHONPATH={REPO}", "--", sys.executable,
               str(REPO / "images/bash-runner/worker.py")]  # fmt: skip
PYTHON_WORKER = ["--env", f"PYTHONPATH={REPO}", "--", sys.executable,
                 str(REPO / "images/python-runner/worker.py")]  # fmt: skip


def saved_request(**fields: object) -> bytes:
    document = {"kind": "ToolCallRequest", "version": "1.0", "id": "t1", "tool": {"name": "bash"},
                "arguments": {"script": "echo hi"}, "limits": {"max_result_bytes": 65536},
                **fields}  # fmt: skip
    return json.dumps(document).encode()


def test_a_request_without_deadline_ms_gets_one_from_now():
    done = agents_runner("isolate", "--runner", "local", *BASH_WORKER, stdin=saved_request())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output"]["content"]["stdout"] == "hi\n"


def test_a_stale_request_is_refused_naming_timeout_and_runs_with_it():
    stale = saved_request(deadline_ms=int((time.time() - 60) * 1000))
    done = agents_runner("isolate", "--runner", "local", *BASH_WORKER, stdin=stale)
    assert done.returncode == 2 and done.stdout == b""
    err = done.stderr.decode()
    assert re.search(r"passed 6\d s ago", err) and "--timeout SECONDS" in err, err
    assert len(err.strip().splitlines()) == 1
    again = agents_runner("isolate", "--runner", "local", "--timeout", "20", *BASH_WORKER,
                          stdin=stale)  # fmt: skip
    assert again.returncode == 0, again.stderr


def test_bash_shortcut_runs_a_command_and_shows_a_non_zero_exit():
    done = agents_runner("isolate", "--runner", "local", "--bash", "echo hi; exit 3",
                         *BASH_WORKER)  # fmt: skip
    assert done.returncode == 0, done.stderr
    content = json.loads(done.stdout)["output"]["content"]
    assert (content["stdout"], content["exit_code"]) == ("hi\n", 3)
    assert "the program exited with status 3" in done.stderr.decode()


def test_script_shortcut_picks_the_tool_by_suffix(tmp_path):
    script = tmp_path / "sum.py"
    script.write_text("import sys\nprint(sum(map(int, sys.stdin.read().split())))\n")
    done = agents_runner("isolate", "--runner", "local", "--script", str(script),
                         "--stdin", "1 2 3", *PYTHON_WORKER)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output"]["content"]["stdout"] == "6\n"
    assert done.stderr == b""  # exit 0: no note


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bash", "x", "--python", "y"], "not --bash and --python"),
        (["--stdin", "x"], "--stdin goes with --bash"),
        ([], "--runner is required"),
        (["--bash", "x", "--script", "/nonexistent.sh"], "not --bash and --script"),
        (["--script", "/nonexistent.sh"], "--script: cannot read /nonexistent.sh"),
    ],
)
def test_shortcut_mistakes_get_one_line(args, message):
    done = agents_runner("isolate", *args, stdin=saved_request())
    assert done.returncode == 2
    assert message in done.stderr.decode(), done.stderr
    assert len(done.stderr.decode().strip().splitlines()) == 1


def test_a_killed_call_keeps_its_output_tail_without_stream():
    hangs = saved_request(arguments={"script": "echo started; sleep 60"})
    done = agents_runner(
        "isolate", "--runner", "local", "--timeout", "3", *BASH_WORKER, stdin=hangs
    )
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "WORKER_TIMEOUT" and error["output_tail"] == "started\n"


def test_describe_asks_at_1_1_and_shows_the_capabilities():
    done = agents_runner("describe", "--runner", "local", *BASH_WORKER)
    assert done.returncode == 0, done.stderr
    described = json.loads(done.stdout)
    assert described["version"] == "1.1"
    assert set(described["capabilities"]) >= {"files", "events"}
    older = agents_runner("describe", "--runner", "local", "--version", "1.0", *BASH_WORKER)
    assert json.loads(older.stdout)["version"] == "1.0"


def test_describe_of_a_1_0_worker_falls_back_to_1_0():
    minimal = ["--", "perl", str(REPO / "examples/workers/minimal/worker.pl")]
    done = agents_runner("describe", "--runner", "local", *minimal)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["supported_versions"] == ["1.0"]


def all_commands() -> list[list[str]]:
    import typer.main

    from runner.cli import app

    root = typer.main.get_command(app)
    found = []
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        subcommands = getattr(command, "commands", None)
        if subcommands:
            found += [[name, sub] for sub in subcommands]
        else:
            found.append([name])
    return found


def test_help_texts_are_not_hard_wrapped_and_show_no_bool_metavar():
    import typer.main

    from runner.cli import app

    root = typer.main.get_command(app)
    env = {**__import__("os").environ, "COLUMNS": "250"}
    for path in all_commands():
        command = root
        for name in path:
            command = command.commands[name]  # type: ignore[attr-defined]
        done = subprocess.run([*CLI, *path, "--help"], capture_output=True, text=True,
                              cwd=REPO, env=env, timeout=60)  # fmt: skip
        assert done.returncode == 0, (path, done.stderr)
        assert "<bool>" not in done.stdout, path
        assert_reflowed(done.stdout, command.help or "", path)


def assert_reflowed(shown: str, help_text: str, path: list[str]) -> None:
    """The first paragraph of `help_text` is shown reflowed to HELP_WIDTH: every line
    but its last is full (its next word would not have fit), whatever the source's
    own line breaks."""
    from runner.cli.app import HELP_WIDTH

    words = help_text.split("\n\n")[0].split()
    lines = shown.split("\n\n")[1].splitlines()  # after the usage line
    assert " ".join(" ".join(lines).split()) == " ".join(words), (path, lines)
    for line, after in itertools.pairwise(lines):
        width = len(line) + 1 + len(after.split()[0])
        assert width > HELP_WIDTH - 2, (path, "a line broken early", line)  # click: -2
