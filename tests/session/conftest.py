"""Helpers for session tests: agents built from plain dicts, a real SQLite store, and
in-process tools registered under test names."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from runner.session import DurableAgent, parse_agent, with_durable_workflows
from runner.stores import SQLiteStore
from runner.tools import ToolFailure, ToolRegistry, default_tools

OBJECT = {"type": "object"}


def agent_doc(responses: list[dict], tool_names: list[str], policy: dict | None = None,
              **extra: Any) -> dict:  # fmt: skip
    return {
        "slug": "test",
        "provider": {"tag": "scripted", "responses": responses},
        "tools": [{"name": name, "kind": "builtin", "parameters": OBJECT} for name in tool_names],
        "toolCallPolicyConfig": policy or {"default": {"tag": "runSync"}},
        # Asynchronous unless a test says otherwise: only asynchronous agents yield.
        "executionMode": "asynchronous",
        **extra,
    }


def calls(*pairs: tuple[str, str], **arguments: Any) -> dict:
    """One scripted response asking for tools: calls(("id", "tool"), ...)."""
    return {"tool_calls": [{"id": i, "name": n, "arguments": arguments} for i, n in pairs]}


FINAL = {"text": "done: {{result:a}} {{result:b}}"}


@pytest.fixture
def store(tmp_path) -> SQLiteStore:
    opened = SQLiteStore(tmp_path / "state.db")
    yield opened
    opened.close()


@pytest.fixture
def registry() -> ToolRegistry:
    """This test's built-in tools: the defaults plus whatever the test adds."""
    return default_tools()


@pytest.fixture
def durable(store, registry):
    def build(document: dict, **options: Any) -> DurableAgent:
        options.setdefault("tools", registry)
        return replace(with_durable_workflows(parse_agent(document), store), **options)

    return build


class Counter:
    """A registered tool that counts its calls and fails the first `failures` of them."""

    def __init__(self, registry: ToolRegistry, name: str, failures: int = 0,
                 retryable: bool = True) -> None:  # fmt: skip
        self.name, self.failures, self.retryable, self.count = name, failures, retryable, 0
        registry.add(name, self)

    def __call__(self, arguments: dict) -> Any:
        self.count += 1
        if self.count <= self.failures:
            raise ToolFailure(f"failure {self.count}", retryable=self.retryable)
        return f"{self.name} #{self.count}"
