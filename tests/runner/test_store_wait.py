"""Long-running commands wait for a store whose server does not answer yet (a database
still starting, or restarting) instead of exiting at once, and give up after
AGENTS_RUNNER_STORE_WAIT_SECONDS with the reason."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

from tests.conftest import REPO

CLI = [sys.executable, "-m", "runner.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def worker(url: str, wait_s: float) -> subprocess.Popen[str]:
    env = {**os.environ, "AGENTS_RUNNER_STORE_WAIT_SECONDS": str(wait_s)}
    return subprocess.Popen([*CLI, "worker", "--store", url, "--exit-when-idle"], cwd=REPO,
                            env=env, stderr=subprocess.PIPE, text=True)  # fmt: skip


@contextmanager
def forwarder(port: int, target: tuple[str, int]) -> Iterator[None]:
    """127.0.0.1:`port` forwarded to `target`: the database "comes up" when this starts."""
    listener = socket.create_server(("127.0.0.1", port))
    stop = threading.Event()

    def pipe(source: socket.socket, sink: socket.socket) -> None:
        with source, sink:
            while data := source.recv(65536):
                sink.sendall(data)

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            upstream = socket.create_connection(target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_a_worker_gives_up_on_a_store_that_never_answers_saying_why():
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    done = worker(url, 1.5)
    _, stderr = done.communicate(timeout=60)
    assert done.returncode == 1
    assert "waiting for the store" in stderr
    assert "agents-runner: error: cannot connect to" in stderr and "Traceback" not in stderr


def test_a_worker_started_before_its_database_connects_once_it_answers(postgres_url: str):
    parts = urlsplit(postgres_url)
    port = free_port()
    late = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}"))
    started = worker(late, 60)
    try:
        # Nothing listens yet: the worker says it waits (and has not exited).
        assert started.stderr is not None
        line = started.stderr.readline()
        assert "waiting for the store" in line, line
        assert started.poll() is None
        with forwarder(port, (parts.hostname or "127.0.0.1", parts.port or 5432)):
            _, rest = started.communicate(timeout=60)
    finally:
        started.kill()
    assert started.returncode == 0, rest  # connected, found nothing due, exited idle
