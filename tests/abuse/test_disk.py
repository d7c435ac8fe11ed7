"""Disk: /tmp is the only writable place, bounded by its tmpfs size and the file-size
ulimit, and it does not outlive the call."""

from __future__ import annotations

import pytest

from tests.abuse.conftest import attack

pytestmark = pytest.mark.anyio


async def test_filling_tmp_stops_at_the_tmpfs_size(api):
    script = "for i in 1 2 3; do head -c 40M /dev/zero > /tmp/fill$i; done; du -sk /tmp"
    hit = await attack(api, script)
    assert "No space left on device" in hit.content["stderr"]
    assert int(hit.content["stdout"].split()[0]) <= 64 * 1024


async def test_a_sparse_terabyte_file_is_refused_by_the_file_size_limit(api):
    hit = await attack(api, "truncate -s 1T /tmp/sparse; echo rc=$?; wc -c < /tmp/sparse")
    rc, size = hit.content["stdout"].split()
    assert rc == "rc=153"  # 128 + SIGXFSZ: the fsize ulimit
    assert "File size limit exceeded" in hit.content["stderr"]
    assert int(size) == 0


async def test_thousands_of_files(api):
    script = "mkdir /tmp/many && cd /tmp/many && seq 20000 | xargs touch && ls | wc -l"
    hit = await attack(api, script)
    assert hit.content["stdout"].strip() == "20000"


async def test_a_thousand_deep_directory_tree(api):
    script = ("p=/tmp/deep; for i in $(seq 1000); do p=$p/d; done; mkdir -p $p && echo made;"
              " find /tmp/deep -type d | wc -l")  # fmt: skip
    hit = await attack(api, script)
    assert hit.content["stdout"].split() == ["made", "1001"]


async def test_the_root_filesystem_is_read_only(api, case_runtime):
    script = "for p in /x /etc/x /usr/x /var/tmp/x /opt/agents-runner/worker.py; do : > $p; done"
    hit = await attack(api, script)
    if case_runtime == "runc":
        assert hit.content["stderr"].count("Read-only file system") == 5
    else:  # gVisor checks the owner (root) first; /var/tmp (world-writable) shows the mount
        assert hit.content["stderr"].count("Permission denied") == 4
        assert "/var/tmp/x: Read-only file system" in hit.content["stderr"]


async def test_files_left_in_tmp_and_shm_are_gone_in_the_next_call(api):
    await attack(api, "echo secret > /tmp/left-behind; echo secret > /dev/shm/left-behind")
    hit = await attack(api, "ls -A /tmp /dev/shm; cat /tmp/left-behind /dev/shm/left-behind")
    assert "left-behind" not in hit.content["stdout"]
    assert "secret" not in hit.output
