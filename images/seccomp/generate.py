#!/usr/bin/env python3
"""Write runner/isolation/seccomp-profile.json: the seccomp profile DockerRunner applies by default.

An allow-list: every system call of the x86_64 table in the kernel headers (Debian's
linux-libc-dev, /usr/include/x86_64-linux-gnu/asm/unistd_64.h) except DENIED below, which
get EPERM; anything newer than that table gets ENOSYS. `clone` is allowed only without
namespace flags, and `clone3` gets ENOSYS so that the C library falls back to `clone`,
where those flags can be checked. Run from the repository root:

    python3 images/seccomp/generate.py

Why each call is denied is the comment beside it. Most of them also need a capability
the container does not have; the profile is the second wall, for a kernel bug in the first.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

HEADER = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
OUT = Path(__file__).resolve().parents[2] / "runner" / "isolation" / "seccomp-profile.json"
EPERM, ENOSYS = 1, 38

DENIED = {
    # Debugging and reading or writing another process's memory: same-uid processes in the
    # container (the worker itself) would otherwise be open to a script.
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # io_uring: a large kernel attack surface that bypasses per-syscall filtering.
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # Namespaces, mounts and root changes: the container's view of the world is fixed.
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "mount_setattr",
    "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "open_by_handle_at", "name_to_handle_at",
    # Kernel modules, kexec, reboot, swap, accounting, quotas, clocks, kernel log.
    "init_module", "finit_module", "delete_module", "create_module", "query_module",
    "get_kernel_syms", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
    "acct", "quotactl", "quotactl_fd", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "syslog", "_sysctl", "sysfs", "ustat", "uselib", "nfsservctl",
    "lookup_dcookie", "vhangup", "iopl", "ioperm",
    # Kernel keyrings, eBPF, perf, userfaultfd, fanotify: classic exploit primitives.
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "fanotify_init",
    # NUMA placement (needs CAP_SYS_NICE to matter) and odd execution domains.
    "mbind", "set_mempolicy", "get_mempolicy", "move_pages", "migrate_pages",
    "set_mempolicy_home_node", "personality",
}  # fmt: skip
# Namespace flags of clone(2): CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
CLONE_NAMESPACES = (
    0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
)
# personality(2) values that change nothing dangerous (PER_LINUX and friends, and the query).
PERSONALITY_OK = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)


def main() -> None:
    names = sorted(set(re.findall(r"#define __NR_(\w+)\s+\d+", HEADER.read_text())))
    allowed = [n for n in names if n not in DENIED and n not in ("clone", "clone3")]
    profile = {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": ENOSYS,
        "archMap": [
            {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": []},
            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": []},
        ],
        "syscalls": [
            {"names": allowed, "action": "SCMP_ACT_ALLOW"},
            {
                "names": ["clone"],
                "action": "SCMP_ACT_ALLOW",
                "args": [
                    {
                        "index": 0,
                        "value": CLONE_NAMESPACES,
                        "valueTwo": 0,
                        "op": "SCMP_CMP_MASKED_EQ",
                    }
                ],
            },
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS},
            *(
                {
                    "names": ["personality"],
                    "action": "SCMP_ACT_ALLOW",
                    "args": [{"index": 0, "value": value, "op": "SCMP_CMP_EQ"}],
                }
                for value in PERSONALITY_OK
            ),
            {
                "names": sorted(DENIED - {"personality"}),
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": EPERM,
            },
        ],
    }
    OUT.write_text(json.dumps(profile, indent=1) + "\n")
    print(f"wrote {OUT}: {len(allowed)} calls allowed, {len(DENIED)} denied")


if __name__ == "__main__":
    main()
