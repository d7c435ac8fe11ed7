"""Running a command on a real pseudo-terminal of a given size (what a person's terminal
is to the command: `isatty()` true, the window size from the kernel)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

#: The SGR sequences rich itself writes for styles (bold, colours, reset).
RICH_STYLE = re.compile(r"\x1b\[[0-9;]*m")


def in_terminal(
    args: list[str], cwd: Path, columns: int = 80, timeout: float = 120.0
) -> tuple[int, str]:
    """(exit status, everything written to the terminal) of `args` run with stdin,
    stdout and stderr on a pty `columns` wide."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env,
                            close_fds=True, start_new_session=True)  # fmt: skip
    os.close(slave)
    chunks: list[bytes] = []
    give_up = time.monotonic() + timeout
    try:
        while True:
            left = give_up - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{args} did not finish in {timeout} s")
            ready, _, _ = select.select([master], [], [], left)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed its side
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(1.0, give_up - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
