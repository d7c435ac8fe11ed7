"""The tool cache, the same SQL on both engines: one row per tool and canonical
arguments (runner.stores.base.cache_key), with an optional expiry in store time."""

from __future__ import annotations

from typing import Any

from runner.state import ToolResult
from runner.stores.base import ToolCache, cache_key
from runner.stores.sql.engine import Engine, one


class SqlToolCache(ToolCache):
    def __init__(self, engine: Engine[Any]) -> None:
        self._engine = engine
        sql = engine.dialect.sql
        self._get = sql(
            "SELECT result FROM tool_cache WHERE key = ? AND (expires_ms IS NULL OR expires_ms > ?)"
        )
        self._put = sql(
            "INSERT INTO tool_cache (key, tool, result, created_ms, expires_ms)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET tool = excluded.tool,"
            " result = excluded.result, created_ms = excluded.created_ms,"
            " expires_ms = excluded.expires_ms"
        )

    def get(self, tool: str, arguments: dict[str, Any]) -> ToolResult | None:
        key, now = cache_key(tool, arguments), self._engine.stamp()
        row = self._engine.read("reading the tool cache", lambda tx: one(tx, self._get, (key, now)))
        return ToolResult.model_validate_json(row[0]) if row else None

    def put(
        self, tool: str, arguments: dict[str, Any], result: ToolResult, ttl_s: float | None
    ) -> None:
        now = self._engine.stamp()
        expires = now + int(ttl_s * 1000) if ttl_s is not None else None
        values = (cache_key(tool, arguments), tool, result.model_dump_json(), now, expires)
        self._engine.change("writing the tool cache", lambda tx: tx.execute(self._put, values))
