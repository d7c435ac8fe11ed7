"""StoredAgents: the DurableAgent of each agent a store holds, made once per agent hash
(a definition never changes under its hash) and kept, least recently used dropped past
`size`. A process that advances many sessions (a worker, the server) thereby reuses each
agent's parsed definition and kept conversations (runner.session.prompt) instead of
re-reading a session's history for its next model call."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import anyio.to_thread

from runner.session.agent import Agent, parse_agent
from runner.session.scheduler import DurableAgent
from runner.session.secrets import Keyring
from runner.stores import SessionStore

#: Stored agents kept by default.
AGENTS_KEPT = 64


class StoredAgents:
    """`build` turns a stored definition (in asynchronous mode) into the DurableAgent
    the process uses; it runs once per agent hash while that agent is kept."""

    def __init__(self, store: SessionStore, build: Callable[[Agent], DurableAgent],
                 size: int = AGENTS_KEPT, keyring: Keyring | None = None) -> None:  # fmt: skip
        self._store, self._build, self._size = store, build, size
        #: Where the definitions with secret values are found (runner.session.secrets).
        self._keyring = keyring if keyring is not None else Keyring()
        self._kept: OrderedDict[str, DurableAgent] = OrderedDict()
        #: Hashes whose agent lacks secret values (runner.session.secrets): read again
        #: until this process has seen the definition that has them.
        self._lacking: set[str] = set()

    def __len__(self) -> int:
        return len(self._kept)

    async def of_hash(self, agent_hash: str) -> DurableAgent:
        """The agent stored under `agent_hash` (StoreError when there is none, AgentError
        when it no longer parses). Call from one event loop."""
        durable = self._kept.get(agent_hash)
        if durable is None or agent_hash in self._lacking:
            document = await anyio.to_thread.run_sync(self._store.agent_document, agent_hash)
            agent = parse_agent(document, "stored agent", keyring=self._keyring)
            agent = agent.with_mode("asynchronous")
            if durable is None or not agent.secret_names:
                durable = self._kept[agent_hash] = self._build(agent)
            if agent.secret_names:
                self._lacking.add(agent_hash)
            else:
                self._lacking.discard(agent_hash)
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)
        self._kept.move_to_end(agent_hash)
        return durable


__all__ = ["AGENTS_KEPT", "StoredAgents"]
