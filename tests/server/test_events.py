"""Server-Sent Events over a real uvicorn: the seed's session streamed live, resumed with
Last-Event-ID after a disconnect, /v1/events per role, and the errors."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from runner.server import create_app
from runner.server import events as server_events
from runner.server.events import close_streams
from runner.stores import SQLiteStore
from tests.server.conftest import TOKENS, Served, agents_dir, grants

#: How long a test waits for what it expects before it fails (keep-alive comments
#: arrive every 15 s, so a stream that goes quiet still gets this deadline checked).
DEADLINE_S = 60


@dataclass
class Message:
    id: int
    event: str
    data: dict[str, Any]


class Events:
    """An open SSE response, read one message at a time."""

    def __init__(self, response: httpx.Response) -> None:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        self.lines = response.iter_lines()
        self.comments: list[str] = []

    def next(self) -> Message:
        fields: dict[str, str] = {}
        give_up = time.monotonic() + DEADLINE_S
        for line in self.lines:
            if time.monotonic() > give_up:
                raise AssertionError(f"no event within {DEADLINE_S}s")
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
            elif line:
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
            elif "data" in fields:
                return Message(int(fields["id"]), fields["event"], json.loads(fields["data"]))
        raise AssertionError("the stream ended")

    def take(self, count: int) -> list[Message]:
        return [self.next() for _ in range(count)]

    def subscribed(self) -> None:
        """Read up to the comment that says the server has subscribed this stream."""
        for line in self.lines:
            if line.startswith(": subscribed"):
                return
        raise AssertionError("the stream ended before it was subscribed")


@contextmanager
def events(served: Served, path: str, who: str | None = "operator",
           **headers: str) -> Iterator[Events]:  # fmt: skip
    with served.client(who) as http, http.stream("GET", path, headers=headers) as response:
        yield Events(response)


def start(served: Served) -> tuple[str, dict[str, str]]:
    """A session of the seed's agent run to its first wait: (id, tool -> token)."""
    with served.client() as http:
        made = http.post("/v1/sessions", json={"agent": "my-agent.scripted.json",
                                               "prompt": "go", "run": True})  # fmt: skip
        assert made.status_code == 201 and made.json()["state"] == "waiting", made.text
        session_id = made.json()["session_id"]
        pending = http.get(f"/v1/sessions/{session_id}/pending").json()["calls"]
    return session_id, {c["tool"]: c["continuation_token"] for c in pending}


def complete(served: Served, token: str, result: Any, resume: bool = False) -> None:
    with served.client() as http:
        done = http.post(f"/v1/continuations/{token}", json={"result": result, "resume": resume})
        assert done.status_code == 200 and done.json()["status"] == "applied", done.text


def summary(messages: list[Message]) -> list[tuple[str, str | None]]:
    return [(m.event, m.data.get("call_id")) for m in messages]


#: What the seed's session logs until its first wait.
UNTIL_WAITING = [("session.created", None), ("call.deferred", "call_remote_a"),
                 ("call.deferred", "call_remote_b"), ("call.completed", "call_local"),
                 ("session.waiting", None)]  # fmt: skip


def test_a_session_stream_delivers_the_seed_flow_live(served: Served) -> None:
    session_id, tokens = start(served)
    with events(served, f"/v1/sessions/{session_id}/events") as stream:
        history = stream.take(5)
        assert summary(history) == UNTIL_WAITING
        deferred = history[1]
        assert deferred.data["continuation_token"] == tokens["fetch_remote_a"]
        assert deferred.data["tool"] == "fetch_remote_a" and deferred.data["state"] == "deferred"
        assert deferred.data["session_id"] == session_id and deferred.data["kind"] == deferred.event
        complete(served, tokens["fetch_remote_a"], {"type": "json", "content": {"orders": 12}})
        done = stream.next()
        assert (done.event, done.data["call_id"], done.data["state"]) == (
            "call.completed", "call_remote_a", "completed")  # fmt: skip
        assert done.data["result"]["status"] == "ok"
        complete(served, tokens["fetch_remote_b"], "3 open tickets", resume=True)
        rest = stream.take(3)
        assert summary(rest) == [("call.completed", "call_remote_b"), ("session.running", None),
                                 ("session.completed", None)]  # fmt: skip
        assert "3 open tickets" in rest[-1].data["final_answer"]
    ids = [m.id for m in [*history, done, *rest]]
    assert ids == [e.seq for e in served.store.events(0, session_id=session_id)]
    assert all(m.data["seq"] == m.id for m in [*history, done, *rest])


def test_a_reconnect_with_last_event_id_gets_exactly_what_it_missed(served: Served) -> None:
    session_id, tokens = start(served)
    path = f"/v1/sessions/{session_id}/events"
    with events(served, path) as stream:
        first = stream.take(3)
    # Disconnected: more events happen meanwhile.
    complete(served, tokens["fetch_remote_a"], "a")
    complete(served, tokens["fetch_remote_b"], "b", resume=True)
    stored = [e.seq for e in served.store.events(0, session_id=session_id)]
    assert len(stored) == 9
    with events(served, path, **{"Last-Event-ID": str(first[-1].id)}) as stream:
        missed = stream.take(len(stored) - 3)
        assert stream.comments == [f"subscribed after {first[-1].id}"]
    assert [m.id for m in first] + [m.id for m in missed] == stored
    assert summary(missed)[-1] == ("session.completed", None)
    # ?after=N says the same, and the header wins over it.
    with events(served, f"{path}?after={stored[6]}") as stream:
        assert [m.id for m in stream.take(2)] == stored[7:]
    with events(served, f"{path}?after=0", **{"Last-Event-ID": str(stored[7])}) as stream:
        assert stream.next().id == stored[8]


def test_a_subscriber_that_falls_behind_catches_up_from_the_store(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue of one: a write of two events overflows it, and the stream reads what it
    dropped from the store instead (in order, none twice)."""
    monkeypatch.setattr(server_events, "QUEUE_SIZE", 1)
    session_id, tokens = start(served)
    with events(served, f"/v1/sessions/{session_id}/events") as stream:
        assert summary(stream.take(5)) == UNTIL_WAITING
        complete(served, tokens["fetch_remote_a"], "a")
        complete(served, tokens["fetch_remote_b"], "b", resume=True)
        rest = stream.take(4)
    assert summary(rest) == [("call.completed", "call_remote_a"),
                             ("call.completed", "call_remote_b"), ("session.running", None),
                             ("session.completed", None)]  # fmt: skip
    assert [m.id for m in rest] == [e.seq for e in served.store.events(0)][5:]


def test_v1_events_streams_every_session_to_a_viewer_from_now(served: Served) -> None:
    earlier, _ = start(served)
    with events(served, "/v1/events", "viewer") as stream:
        stream.subscribed()
        later, tokens = start(served)
        seen = stream.take(5)
        assert summary(seen) == UNTIL_WAITING
        assert {m.data["session_id"] for m in seen} == {later}
        complete(served, tokens["fetch_remote_a"], "a")
        assert summary([stream.next()]) == [("call.completed", "call_remote_a")]
    with events(served, "/v1/events?after=0", "viewer") as stream:
        replay = stream.take(11)
    assert [m.data["session_id"] for m in replay] == [earlier] * 5 + [later] * 6


def test_a_worker_sees_only_the_call_events_of_its_tools(served: Served) -> None:
    first, tokens = start(served)
    with events(served, "/v1/events?after=0", "worker-a") as stream:
        seen = stream.next()
        assert (seen.event, seen.data["tool"], seen.data["session_id"]) == (
            "call.deferred", "fetch_remote_a", first)  # fmt: skip
        complete(served, tokens["fetch_remote_b"], "b")  # another tool: not shown
        complete(served, tokens["fetch_remote_a"], "a", resume=True)
        done = stream.next()
        assert (done.event, done.data["tool"]) == ("call.completed", "fetch_remote_a")
        second, _ = start(served)  # its deferral is the next thing this worker sees
        after = stream.next()
        assert (after.event, after.data["tool"], after.data["session_id"]) == (
            "call.deferred", "fetch_remote_a", second)  # fmt: skip
    with events(served, f"/v1/sessions/{first}/events", "worker-b") as stream:
        mine = stream.take(2)
    assert summary(mine) == [
        ("call.deferred", "call_remote_b"),
        ("call.completed", "call_remote_b"),
    ]


def test_event_streams_refuse_what_they_should(served: Served) -> None:
    session_id, _ = start(served)
    with served.client(None) as http:
        for path in ("/v1/events", f"/v1/sessions/{session_id}/events"):
            refused = http.get(path)
            assert refused.status_code == 401 and refused.json()["type"].endswith("unauthorized")
    with served.client("viewer") as http:
        unknown = http.get("/v1/sessions/s-nope/events")
        assert unknown.status_code == 404 and unknown.json()["type"].endswith("unknown_session")
        assert unknown.headers["content-type"] == "application/problem+json"
        bad = http.get("/v1/events", headers={"Last-Event-ID": "seven"})
        assert bad.status_code == 422 and "last-event-id" in bad.json()["detail"]
        negative = http.get(f"/v1/sessions/{session_id}/events", params={"after": -1})
        assert negative.status_code == 422 and "after" in negative.json()["detail"]


def test_close_streams_ends_open_streams_so_uvicorn_stops(tmp_path: Path) -> None:
    """uvicorn waits for open responses when it stops; close_streams ends them first."""
    store = SQLiteStore(tmp_path / "state.db")
    app = create_app(store, agents_dir(tmp_path), grants())
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    host, port = sock.getsockname()
    headers = {"Authorization": f"Bearer {TOKENS['viewer']}"}
    try:
        with (
            httpx.Client(base_url=f"http://{host}:{port}", headers=headers, timeout=30) as http,
            http.stream("GET", "/v1/events") as response,
        ):
            stream = Events(response)
            stream.subscribed()
            close_streams(app)  # from another thread than the server's
            server.should_exit = True
            thread.join(30)
            assert not thread.is_alive(), "uvicorn did not stop"
            assert [line for line in stream.lines if line] == []  # it ended, nothing came
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        store.close()
