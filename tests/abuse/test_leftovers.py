"""Leftovers: processes a script leaves behind do not hold the call open, and die with
its container (attack() checks that no process of the container remains on the host)."""

from __future__ import annotations

import pytest

from tests.abuse.conftest import attack

pytestmark = pytest.mark.anyio
SECONDS = 20


async def test_background_sleep_does_not_hold_the_call(api):
    hit = await attack(api, "sleep 1000 & echo started", seconds=SECONDS)
    assert hit.content["stdout"] == "started\n"
    assert hit.outcome.duration_ms < SECONDS * 1000 / 2


async def test_setsid_nohup_daemon_does_not_hold_the_call(api):
    script = "setsid nohup sleep 1000 > /dev/null 2>&1 < /dev/null & disown; echo detached"
    hit = await attack(api, script, seconds=SECONDS)
    assert hit.content["stdout"] == "detached\n"
    assert hit.outcome.duration_ms < SECONDS * 1000 / 2


async def test_grandchild_holding_stdout_does_not_hold_the_call(api):
    # The grandchild leaves the process group and keeps the script's stdout open.
    script = "(setsid sh -c 'sleep 1000; echo late' &); echo parent-done"
    hit = await attack(api, script, seconds=SECONDS)
    assert hit.content["stdout"] == "parent-done\n"
    assert hit.outcome.duration_ms < SECONDS * 1000 / 2
