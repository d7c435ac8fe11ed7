"""Naming a store by its location, as every command does (`--store`).

PATH or sqlite:PATH       an SQLite file (durable; the default)
file:DIR                  sessions as JSON files in DIR (single process only)
LOC,LOC,...               a CompositeStore: reads fall through, writes go to the first
                          (durable exactly when the first is)
"""

from __future__ import annotations

from pathlib import Path

from runner.stores.base import SessionStore, StoreError
from runner.stores.composite import CompositeStore
from runner.stores.files import FileSessionStore
from runner.stores.sqlite import SQLiteStore


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
    if not colon or "/" in scheme or scheme == "":
        return SQLiteStore(location)
    if scheme == "sqlite":
        return SQLiteStore(_path(location, rest))
    if scheme == "file":
        return FileSessionStore(_path(location, rest))
    raise StoreError(
        f"store location {location!r}: unknown kind {scheme!r}; expected a path,"
        " sqlite:PATH or file:DIR"
    )


def _path(location: str, rest: str) -> str:
    if not rest:
        raise StoreError(f"store location {location!r} names no path")
    return rest
