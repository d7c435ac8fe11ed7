"""The PostgreSQL server the tests use, and a fresh database per test.

`scripts/test` starts a throwaway cluster (scripts/lib/postgres.sh) and exports its URL
as AGENTS_RUNNER_TEST_POSTGRES_URL. A pytest run without it starts one the same way for
the session and removes it afterwards; if that fails, the tests that need it fail with
the script's message (nothing is mocked, nothing is skipped).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

REPO = Path(__file__).resolve().parent.parent
URL_VARIABLE = "AGENTS_RUNNER_TEST_POSTGRES_URL"
SCRIPT = f"""
set -euo pipefail
source {REPO}/scripts/lib/engine.sh
source {REPO}/scripts/lib/postgres.sh
ensure_postgres_server
start_test_postgres
printf '%s\\n%s\\n' "$AGENTS_RUNNER_TEST_POSTGRES_URL" "$AGENTS_RUNNER_TEST_POSTGRES_DIR"
"""


@contextmanager
def server_url() -> Iterator[str]:
    """The cluster's URL (user postgres, database postgres): the one scripts/test
    started, or one started here for as long as the block runs."""
    given = os.environ.get(URL_VARIABLE)
    if given:
        yield given
        return
    done = subprocess.run(["bash", "-c", SCRIPT], capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"could not start a test PostgreSQL cluster:\n{done.stderr}")
    url, directory = done.stdout.split()
    try:
        yield url
    finally:
        stop = f"source {REPO}/scripts/lib/postgres.sh; _AR_PG_DIR={directory} stop_test_postgres"
        subprocess.run(["bash", "-c", stop], check=False, timeout=120)


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@contextmanager
def fresh_database(url: str) -> Iterator[str]:
    """A new, empty database on the server at `url`, dropped afterwards (with whatever
    connections a test left open)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(url, name)
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
