"""The embedded default store: one SQLite file in WAL mode.

schema.py holds every table as numbered migrations; engine.py the two connections and
how a call runs on them; sessions.py, leases.py (leases and due-session offers),
events.py and call_claims.py (deferred-call claims) what SQLite does its own way in
each part, beside the SQL both engines share (runner.stores.sql); store.py puts the
parts together as SQLiteStore. Lease expiry is measured in database time.
"""

from runner.stores.sqlite.engine import Synchronous
from runner.stores.sqlite.schema import MIGRATIONS, SCHEMA_VERSION
from runner.stores.sqlite.store import SQLiteStore

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteStore", "Synchronous"]
