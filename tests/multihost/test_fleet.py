"""Worker hosts on one PostgreSQL store: what each host is, and 500 calls run exactly once."""

from __future__ import annotations

import json

import pytest

from tests.multihost.conftest import SHARED, Fleet, agent_document, docker, wait_for

pytestmark = pytest.mark.docker


def test_each_host_is_its_own_machine_on_the_test_network(fleet: Fleet):
    hosts = [fleet.start_host() for _ in range(2)]
    for host in hosts:
        wait_for(lambda h=host: h.state()["Running"], 30, f"{host.name} runs")
    seen = []
    for host in hosts:
        # PID 1 of its own PID namespace is the worker; its hostname is its own; it runs
        # unprivileged with no Docker socket; it reaches the database by name.
        probe = docker(
            "exec",
            host.name,
            "python",
            "-c",
            f"""
import json, os, socket, psycopg
with psycopg.connect({fleet.network_url!r}, connect_timeout=5) as conn:
    client = str(conn.execute("SELECT inet_client_addr()").fetchone()[0])
print(json.dumps({{"pid1": open("/proc/1/cmdline").read().split(chr(0)),
                  "hostname": socket.gethostname(), "uid": os.getuid(), "client": client,
                  "sockets": [p for p in ("/var/run/docker.sock", "/run/docker.sock")
                              if os.path.exists(p)],
                  "shared": os.access({SHARED!r}, os.W_OK)}}))
""",
        )
        facts = json.loads(probe)
        assert facts["hostname"] == host.hostname
        assert "worker" in facts["pid1"] and "--store" in facts["pid1"], facts["pid1"]
        assert facts["uid"] != 0 and facts["sockets"] == [] and facts["shared"], facts
        seen.append(facts["client"])
    assert len(set(seen)) == 2, f"the hosts share a network address: {seen}"
    # From this machine the database is published on loopback only.
    assert docker("port", fleet.db).split() == ["5432/tcp", "->", f"127.0.0.1:{fleet.port}"]


def test_three_hosts_complete_500_calls_each_exactly_once(fleet: Fleet):
    sessions = fleet.start_sessions(agent_document(calls=10), 50)
    hosts = [fleet.start_host(lease_s=3.0) for _ in range(3)]
    wait_for(
        lambda: set(fleet.statuses(sessions).values()) == {"completed"},
        180,
        "all 50 sessions completed",
        interval_s=1.0,
        detail=fleet.diagnostics,
    )
    assert fleet.unfinished_calls(sessions) == []
    expected = {f"{s}/c{i}" for s in sessions for i in range(10)}
    keys = fleet.effects()
    assert len(keys) == 500 and set(keys) == expected, (
        f"{len(keys)} effects, {len(set(keys))} distinct, "
        f"missing {sorted(expected - set(keys))[:5]}, extra {sorted(set(keys) - expected)[:5]}"
    )
    # The store agrees: every call completed on its first attempt, and the ledger says so.
    for session_id in sessions:
        calls = fleet.store.load(session_id).calls
        assert {c.state for c in calls.values()} == {"completed"}, session_id
        for call in calls.values():
            effect = fleet.store.effect(f"{session_id}/{call.id}")
            assert effect is not None and effect.state == "completed", (call.id, effect)
            assert effect.attempt == 1, effect
    # Every host took part (each ran sessions of its own).
    by_host = {host.hostname: host.completed_sessions() for host in hosts}
    assert all(by_host.values()), {h: len(done) for h, done in by_host.items()}
    assert set().union(*by_host.values()) == set(sessions)
