"""The PostgreSQL store: what SQLiteStore does, for workers on many hosts.

schema.py holds every table as numbered migrations; connections.py the pools, the
retry rules and LISTEN connections; engine.py how the parts' calls run on them;
sessions.py, leases.py (leases and due-session offers), events.py and call_claims.py
(deferred-call claims) what PostgreSQL does its own way in each part, beside the SQL
both engines share (runner.stores.sql); store.py puts the parts together.

`PostgresStore(url)` keeps SQLite's tables and semantics (sessions as a header row plus
turn and call rows, compare-and-set on the version, the continuation index, the effect
ledger, late results, the tool cache with its TTL, numbered migrations that refuse a
database from a newer program). What differs is how it shares one database:

- Leases and fencing tokens in database time (`clock_timestamp()` in ms). Taking a lease
  is one upsert that only succeeds once the last holder released it or let it expire
  (counted as a takeover); fencing tokens only grow. A fenced write locks the lease rows
  `FOR SHARE`, so no newer holder can appear between its check and its commit. Leases
  have a pool of their own with a short lock timeout: a renewal never waits for a
  connection behind this process's data calls.
- Due-session offers that scale: `due_sessions` takes rows `FOR UPDATE SKIP LOCKED`
  and marks them offered to this store instance for a moment, so workers polling at
  once get disjoint sessions; a NOTIFY on `agents_runner_due` (when a session is
  created or saved due without a lease, and when a holder releases a due session)
  notifies `wait_for_due` on an idle worker's LISTEN connection. Polling remains the fallback.
- The event log numbered in commit order: `seq` comes from one counter row that each
  event-writing transaction updates last (so they commit in turn), and a NOTIFY on
  `agents_runner_events` notifies `wait_for_events` (events.py says why it is exact).
- Deferred-call claims for claimers (call_claims.py): one statement picks
  deferred calls `FOR UPDATE SKIP LOCKED` and upserts their claims, replacing only a
  released one, so concurrent claimers neither wait for each other nor take one call
  twice.
- Transient failures are retried without ever applying a write twice; a connection lost
  mid-COMMIT is resolved by asking the server for the transaction's outcome
  (connections.py says exactly how).
"""

from runner.stores.postgres.connections import redact
from runner.stores.postgres.events import EVENTS_CHANNEL
from runner.stores.postgres.leases import DUE_CHANNEL
from runner.stores.postgres.schema import MIGRATIONS, SCHEMA_VERSION
from runner.stores.postgres.store import PostgresStore

__all__ = [
    "DUE_CHANNEL",
    "EVENTS_CHANNEL",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PostgresStore",
    "redact",
]
