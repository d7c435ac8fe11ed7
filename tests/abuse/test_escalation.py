"""Escalation: every way up is refused, the uid stays 10001 and the capability sets stay
empty. The raw system calls go through Python's ctypes, so the refusal seen is the
kernel's (capabilities, no-new-privileges, the seccomp profile), not a missing tool.

Under runsc the kernel that answers is gVisor's, without our seccomp profile: ptrace of
the script's own child, io_uring, clone and unshare into new namespaces succeed there,
inside gVisor's kernel (the host's never sees them); mount, module loading, setuid and
chown stay refused. Those cases assert the runsc variant explicitly."""

from __future__ import annotations

import pytest

from runner.isolation import ContainerLimits
from tests.abuse.conftest import attack

pytestmark = pytest.mark.anyio


def syscall_probe(body: str) -> str:
    """A bash script that runs `body` as Python with `libc`, `errno_name()` at hand."""
    return ("python3 - <<'PY'\nimport ctypes, errno, os\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def errno_name():\n    return errno.errorcode.get(ctypes.get_errno(), '0')\n"
            f"{body}\nPY")  # fmt: skip


async def test_sudo_and_su_do_not_give_root(api):
    hit = await attack(api, "sudo id; su -c id root < /dev/null; id -u")
    assert "command not found" in hit.content["stderr"]  # no sudo in the image
    assert hit.content["stdout"].split() == ["10001"]


async def test_setuid_binaries_do_not_raise_privileges(api):
    # mount and su are setuid root in the image; no-new-privileges keeps them at 10001.
    script = "find / -xdev -perm -4000 -type f; mount -t tmpfs none /mnt; echo rc=$?"
    hit = await attack(api, script)
    assert "/usr/bin/mount" in hit.content["stdout"]
    assert "rc=32" in hit.content["stdout"]
    assert "must be superuser" in hit.content["stderr"]


async def test_a_setuid_copy_in_tmp_neither_runs_nor_raises(api, case_runtime):
    script = ("cp /usr/bin/id /tmp/id && chmod u+s /tmp/id && /tmp/id -u;"
              " grep ' /tmp ' /proc/mounts")  # fmt: skip
    hit = await attack(api, script)
    assert "/tmp/id: Permission denied" in hit.content["stderr"]
    options = set(hit.content["stdout"].split()[3].split(","))
    # gVisor's /proc/mounts lists noexec only (the exec above is refused all the same).
    assert ({"nosuid", "noexec", "nodev"} if case_runtime == "runc" else {"noexec"}) <= options


async def test_the_mount_system_call_is_refused(api):
    body = ("print(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None), errno_name())\n"
            "print(libc.umount2(b'/proc', 2), errno_name())")  # fmt: skip
    hit = await attack(api, syscall_probe(body))
    assert hit.content["stdout"].split() == ["-1", "EPERM", "-1", "EPERM"]


async def test_unshare_is_refused(api, case_runtime):
    hit = await attack(api, "unshare -r id; unshare -U -n true; echo rc=$?")
    if case_runtime == "runsc":  # namespaces of gVisor's kernel: root there is no one here
        assert hit.content["stdout"].startswith("uid=0(root)") and "rc=0" in hit.content["stdout"]
        return
    assert hit.content["stderr"].count("Operation not permitted") == 2
    assert "rc=1" in hit.content["stdout"]


async def test_chown_to_root_is_refused(api):
    owner = "python3 -c 'import os; print(os.stat(\"/tmp/f\").st_uid)'"  # gVisor: no statx
    hit = await attack(api, f"touch /tmp/f && chown 0:0 /tmp/f; {owner}")
    assert "Operation not permitted" in hit.content["stderr"]
    assert hit.content["stdout"].strip() == "10001"


async def test_ptrace_of_another_process_is_refused(api, case_runtime):
    # A sibling of the same uid, and the worker itself (the script's parent).
    body = ("pid = os.fork()\nif pid == 0:\n    os.execvp('sleep', ['sleep', '5'])\n"
            "print(libc.ptrace(16, pid, 0, 0), errno_name())\n"
            "print(libc.ptrace(16, os.getppid(), 0, 0), errno_name())\n"
            "iov = (ctypes.c_char * 8)()\n"
            "print(libc.process_vm_readv(pid, ctypes.byref(iov), 1, ctypes.byref(iov), 1, 0),"
            " errno_name())\nos.kill(pid, 9)")  # fmt: skip
    hit = await attack(api, syscall_probe(body))
    if case_runtime == "runsc":  # gVisor's ptrace: its own child only, never the worker
        out = hit.content["stdout"].split()
        assert out[0] == "0" and out[2:] == ["-1", "EPERM", "-1", "ENOSYS"], out
        return
    assert hit.content["stdout"].split() == ["-1", "EPERM"] * 3


async def test_loading_a_kernel_module_is_refused(api):
    body = ("print(libc.syscall(175, None, 0, b''), errno_name())\n"  # init_module
            "print(libc.syscall(313, 0, b'', 0), errno_name())")  # finit_module  # fmt: skip
    hit = await attack(api, syscall_probe(body))
    assert hit.content["stdout"].split() == ["-1", "EPERM", "-1", "EPERM"]


async def test_io_uring_is_refused(api, case_runtime):
    body = ("params = ctypes.create_string_buffer(120)\n"
            "print(libc.syscall(425, 4, params), errno_name())")  # io_uring_setup  # fmt: skip
    hit = await attack(api, syscall_probe(body))
    if case_runtime == "runsc":  # gVisor's own io_uring: the host's is never reached
        assert int(hit.content["stdout"].split()[0]) >= 0
        return
    assert hit.content["stdout"].split() == ["-1", "EPERM"]


async def test_new_namespaces_through_clone_are_refused(api, case_runtime):
    body = ("flags = 0x10000000 | 0x40000000 | 17  # CLONE_NEWUSER | CLONE_NEWNET | SIGCHLD\n"
            "pid = libc.syscall(56, flags, 0, 0, 0, 0)  # clone\n"
            "if pid == 0:\n    os._exit(0)\n"
            "print(pid, errno_name())")  # fmt: skip
    hit = await attack(api, syscall_probe(body))
    if case_runtime == "runsc":  # a child in namespaces of gVisor's kernel
        assert int(hit.content["stdout"].split()[0]) > 0
        return
    assert hit.content["stdout"].split()[0] == "-1"


async def test_uid_stays_non_root_and_capabilities_are_empty(api, case_runtime):
    fields = "Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp"
    script = f"grep -E '^({fields}):' /proc/self/status"
    hit = await attack(api, script)
    status = dict(line.split(":", 1) for line in hit.content["stdout"].splitlines())
    assert status["Uid"].split() == ["10001"] * 4 and status["Gid"].split() == ["10001"] * 4
    if case_runtime == "runsc":  # gVisor's status: no CapAmb or NoNewPrivs, no filter
        assert "CapAmb" not in status and "NoNewPrivs" not in status
        assert status["Seccomp"].strip() == "0"  # the profile is not loaded (gVisor's kernel)
        status["CapAmb"] = "0"
    for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[caps], 16) == 0, caps
    if case_runtime == "runc":
        assert status["NoNewPrivs"].strip() == "1"
        assert status["Seccomp"].strip() == "2"  # a filter is installed


async def test_kernel_settings_are_read_only(api, case_runtime):
    # A per-container (UTS namespace) setting: harmless even if it were writable.
    hit = await attack(api, "echo evil > /proc/sys/kernel/domainname; echo rc=$?")
    assert "rc=1" in hit.content["stdout"]
    refusal = "Read-only file system" if case_runtime == "runc" else "Permission denied"
    assert refusal in hit.content["stderr"]


async def test_killing_its_own_worker_is_a_typed_crash(api):
    hit = await attack(api, "kill -9 1 2>&1; kill -KILL $PPID; sleep 5")
    assert hit.outcome.error_code == "WORKER_CRASHED", hit.outcome.result


async def test_the_engines_default_profile_would_allow_ptrace(api):
    # Control for the ptrace and io_uring cases: opted out of our seccomp profile, the
    # same probes succeed on this kernel, so what refuses them above is the profile.
    body = ("pid = os.fork()\nif pid == 0:\n    os.execvp('sleep', ['sleep', '5'])\n"
            "print(libc.ptrace(16, pid, 0, 0))\nos.kill(pid, 9)")  # fmt: skip
    hit = await attack(api, syscall_probe(body), limits=ContainerLimits(seccomp_profile=None))
    assert hit.content["stdout"].split() == ["0"]


async def test_a_missing_seccomp_profile_fails_closed(api, tmp_path):
    limits = ContainerLimits(seccomp_profile=str(tmp_path / "absent.json"))
    hit = await attack(api, "echo ran", limits=limits)
    assert hit.outcome.error_code == "WORKER_START_FAILED"
    assert "seccomp_profile=None" in hit.outcome.result.error.message
