"""Scripts longer than a command line can carry (the kernel's MAX_ARG_STRLEN is 128 KiB)
run through the Docker runner: bash-runner and python-runner hand them to the child on a
descriptor instead of argv, up to the schemas' 1 MiB."""

from __future__ import annotations

import hashlib

import pytest

from runner.isolation import DockerRunner
from tests.conftest import make_request
from tests.docker.conftest import BASH_IMAGE, PYTHON_IMAGE

pytestmark = pytest.mark.anyio
KiB = 1024


def padded(head: str, comment: str, size: int) -> str:
    """`head` followed by comment lines up to `size` characters (all ASCII)."""
    line = comment + "x" * 99 + "\n"
    body = head + line * ((size - len(head)) // len(line))
    return body + comment * (size - len(body))


@pytest.mark.parametrize("size", [200 * KiB, 1024 * KiB - 64])
async def test_a_long_bash_script_runs(api, size: int) -> None:
    # The script prints a digest of a heredoc that spans the whole padding, so the
    # answer proves bash read every byte of it, not only the start.
    filler = padded("", "", size - 200).replace("\n", "y")
    script = f"echo start\nsha256sum <<'EOF'\n{filler}\nEOF\necho end $((6 * 7))\n"
    assert len(script) > 128 * KiB
    runner = DockerRunner(BASH_IMAGE, api=api)
    outcome = await runner.call(make_request(arguments={"script": script}, seconds=60))
    assert outcome.ok, (outcome.error_code, outcome.result, outcome.stderr_tail)
    content = outcome.result.output.content
    digest = hashlib.sha256((filler + "\n").encode()).hexdigest()
    assert content["stdout"] == f"start\n{digest}  -\nend 42\n", content
    assert content["exit_code"] == 0


async def test_a_long_bash_script_keeps_its_stdin_and_exit_code(api) -> None:
    script = padded("read -r line; echo got $line; exit 3\n", "#", 300 * KiB)
    runner = DockerRunner(BASH_IMAGE, api=api)
    request = make_request(arguments={"script": script, "stdin": "hello\n"}, seconds=60)
    outcome = await runner.call(request)
    assert outcome.ok, (outcome.error_code, outcome.result, outcome.stderr_tail)
    content = outcome.result.output.content
    assert (content["stdout"], content["exit_code"]) == ("got hello\n", 3)


async def test_a_long_python_program_runs(api) -> None:
    code = padded("print(sum(range(10)))\n", "#", 400 * KiB)
    runner = DockerRunner(PYTHON_IMAGE, api=api)
    outcome = await runner.call(make_request("python", {"code": code}, seconds=60))
    assert outcome.ok, (outcome.error_code, outcome.result, outcome.stderr_tail)
    assert outcome.result.output.content["stdout"] == "45\n"
