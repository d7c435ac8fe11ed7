"""The secret values an Engine knows are the ones it was given (runner.session.secrets):
no process-wide keyring. An engine over the same store that never saw the definition
refuses the call, naming the env it lacks; one given the first engine's keyring (as
`serve` gives its session worker the app's) runs it, and the worker gets the value."""

from __future__ import annotations

import anyio
import pytest

from runner.session import Engine, SessionError, parse_agent
from runner.stores import SQLiteStore
from tests.security.test_secrets_at_rest import DIGEST, WORKER, agent


def test_an_engine_knows_the_secrets_it_was_given_or_shares(tmp_path):
    worker = tmp_path / "env_worker.py"
    worker.write_text(WORKER)
    store = SQLiteStore(tmp_path / "state.db")
    given = Engine(store)

    async def main() -> None:
        session = await given.start(parse_agent(agent(worker)), "go")
        assert (await given.resume(session.id)).status == "waiting"  # the call is left
        with pytest.raises(SessionError, match=r"needs the value\(s\) of env API_KEY"):
            await Engine(store).run_isolated(session.id)  # never saw the definition
        shared = Engine(store, keyring=given.keyring)
        await shared.run_isolated(session.id)
        report = await shared.resume(session.id)
        assert report.status == "completed", report.session.failure_reason
        assert report.session.final_answer == f"the worker saw {DIGEST}"

    try:
        anyio.run(main)
    finally:
        store.close()
