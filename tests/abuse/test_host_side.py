"""Host side: what a script leaves for the host to handle. The Docker runner copies no
file out of a container, so links made inside point into the container's own tree; the
local runner removes its working directory without following links; odd file names,
NUL characters, oversized envelopes and a script that never reads its input all end in
a typed answer."""

from __future__ import annotations

import pytest

from runner.isolation import LocalProcessRunner
from tests.abuse.conftest import attack, bash_request, run_call
from tests.conftest import make_request

pytestmark = pytest.mark.anyio
CANARY = "host-canary-91c2"


@pytest.fixture
def host_victim(tmp_path):
    """A host directory with a file in it, and a check that neither changed."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret").write_text(CANARY)

    def unchanged() -> bool:
        return [p.name for p in victim.iterdir()] == ["secret"] and (
            victim / "secret"
        ).read_text() == CANARY

    yield victim, unchanged
    assert unchanged()


async def test_symlinks_to_host_paths_resolve_inside_the_container(api, host_victim):
    victim, unchanged = host_victim
    script = (f"ln -s {victim}/secret /tmp/link; echo pwned > /tmp/link; echo rc=$?;"
              f" ln -s {victim} /tmp/dir; ls /tmp/dir/ 2>&1; cat /tmp/link")  # fmt: skip
    hit = await attack(api, script)
    assert CANARY not in hit.output  # the host file was never read
    assert unchanged()


async def test_local_runner_removes_its_workdir_without_following_links(host_victim):
    victim, unchanged = host_victim
    script = (
        f"ln -s {victim} dir-link; ln -s {victim}/secret file-link; mkdir d; ln -s {victim} d/l"
    )
    runner = LocalProcessRunner(["bash", "-c", script])
    outcome = await runner.call(make_request(seconds=10))
    assert outcome.error_code == "MALFORMED_OUTPUT"  # it wrote no envelope
    assert unchanged()


async def test_odd_file_names_stay_inside_and_arrive_intact(api, case_runtime):
    script = ("cd /tmp && mkdir -p a/b && cd a/b && touch -- ../../../../etc/evil 2>&1;"
              " touch $'new\\nline' '..' '...' $'\\e[2Jclear' && ls -A")  # fmt: skip
    hit = await attack(api, script)
    # ../ reached /etc: read-only (gVisor checks its owner, root, first)
    refusal = "Read-only file system" if case_runtime == "runc" else "Permission denied"
    assert f"'../../../../etc/evil': {refusal}" in hit.content["stdout"]
    assert "new\nline\n" in hit.content["stdout"] and "\x1b[2Jclear" in hit.content["stdout"]
    assert hit.outcome.control_characters


async def test_a_nul_in_the_script_is_invalid_arguments(api):
    hit = await attack(api, "echo a\0; touch /tmp/x\0y")
    assert hit.outcome.error_code == "INVALID_ARGUMENTS"
    assert "NUL" in hit.outcome.result.error.message


async def test_a_script_past_the_tools_size_is_invalid_arguments(api):
    hit = await attack(api, "#" * (2 * 1024 * 1024))
    assert hit.outcome.error_code == "INVALID_ARGUMENTS"


async def test_an_envelope_past_the_request_cap_is_refused_before_any_container(api):
    # 17 MiB: past MAX_REQUEST_BYTES (16 MiB), which no worker is required to read. The
    # runner refuses it itself, with the size in the message, and starts nothing.
    outcome = await run_call(api, bash_request("#" * (17 * 1024 * 1024), seconds=30))
    assert outcome.error_code == "INVALID_REQUEST", outcome.result
    assert "over the cap" in outcome.result.error.message
    assert outcome.runner_info == {"started": False}


async def test_a_script_that_never_reads_its_stdin(api):
    hit = await attack(api, "exec 0<&-; echo ignored", stdin="x" * (1024 * 1024))
    assert hit.content["stdout"] == "ignored\n"
