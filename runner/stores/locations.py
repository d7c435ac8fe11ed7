"""Naming a store by its location, as every command does (`--store`).

PATH or sqlite:PATH     an SQLite file (durable; the default)
DIR or file:DIR         sessions as JSON files in DIR (DIR alone: an existing directory);
                        no leases, so one process at a time may advance its sessions
postgresql://... or      a PostgreSQL database (durable, shared by many hosts; a libpq URL:
postgres://...          user, host, port, database, parameters such as sslmode)
LOC,LOC,...             a CompositeStore: reads fall through, writes go to the first
                        (durable exactly when the first is)
"""

from __future__ import annotations

from pathlib import Path

from runner.stores.base import SessionStore, StoreError
from runner.stores.composite import CompositeStore
from runner.stores.files import FileSessionStore
from runner.stores.postgres import PostgresStore
from runner.stores.sqlite import SQLiteStore

POSTGRES_SCHEMES = ("postgres", "postgresql")


def open_store(location: str | Path) -> SessionStore:
    """The store at `location`; StoreError naming the part that is wrong."""
    text = str(location)
    parts = [p.strip() for p in text.split(",")] if "," in text else [text]
    if any(not p for p in parts):
        raise StoreError(f"store location {text!r} has an empty part")
    opened: list[SessionStore] = []
    try:
        for part in parts:
            opened.append(_one(part))
    except BaseException:
        for store in opened:
            store.close()
        raise
    return opened[0] if len(opened) == 1 else CompositeStore(*opened)


def _one(location: str) -> SessionStore:
    scheme, colon, rest = location.partition(":")
    if scheme in POSTGRES_SCHEMES and rest.startswith("//"):
        return PostgresStore(location)  # its errors and description never show a password
    if not colon or "/" in scheme or scheme == "":
        if Path(location).is_dir():  # an existing directory is a file store
            return FileSessionStore(location)
        return SQLiteStore(location)
    if scheme == "sqlite":
        return SQLiteStore(_path(location, rest))
    if scheme == "file":
        return FileSessionStore(_path(location, rest))
    raise StoreError(
        f"store location {location!r}: unknown kind {scheme!r}; expected a path (an"
        " SQLite file, or an existing directory for the file store), sqlite:PATH, file:DIR"
        " or postgresql://..."
    )


def missing_paths(location: str | Path) -> list[str]:
    """The files and directories `location` names that do not exist (opening it would
    create them); a database server's location names none."""
    missing = []
    for part in str(location).split(","):
        scheme, colon, rest = part.strip().partition(":")
        if scheme in POSTGRES_SCHEMES and rest.startswith("//"):
            continue
        path = rest if colon and scheme in ("sqlite", "file") else part.strip()
        if path and not Path(path).exists():
            missing.append(path)
    return missing


def _path(location: str, rest: str) -> str:
    if not rest:
        raise StoreError(f"store location {location!r} names no path")
    return rest
