"""What the two database engines share: the dialect that renders one SQL text for either
(dialect.py), the engine interface the parts run their statements through (engine.py),
row codecs (rows.py), and the store parts, written once: sessions.py, leases.py,
events.py and call_claims.py leave to each engine only what differs (claiming rows,
bulk writes, announcing), ledger.py, cache.py and audit.py are the same on both.

runner.stores.sqlite and runner.stores.postgres each give an Engine and the parts'
engine-specific halves; neither imports the other.
"""
