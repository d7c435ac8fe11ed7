"""A real `agents-runner serve` running an isolated call whose worker streams events
(tests/session/streaming_worker.py, through the local runner): each event reaches
GET /v1/events as a `call.output` message while the call is still running, without an
`id` (it is not in the log); once the call ends its output is in the session document,
and a stream replayed from the log carries no output."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.server.processes import start_serve, wait_for, wait_for_status, write_json

WORKER = Path(__file__).resolve().parents[1] / "session" / "streaming_worker.py"


class Listener:
    """Follows an SSE stream in a thread: every message, with its fields, in order."""

    def __init__(self, url: str, path: str, headers: dict[str, str] | None = None) -> None:
        self.messages: list[dict[str, Any]] = []
        self.comments: list[str] = []
        self.done = threading.Event()
        self._http = httpx.Client(base_url=url, timeout=httpx.Timeout(60, read=None))
        self._thread = threading.Thread(target=self._follow, args=(path, headers or {}),
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def _follow(self, path: str, headers: dict[str, str]) -> None:
        fields: dict[str, Any] = {}
        try:
            with self._http.stream("GET", path, headers=headers) as answer:
                for line in answer.iter_lines():
                    if line.startswith(":"):
                        self.comments.append(line)
                    elif line:
                        name, _, value = line.partition(": ")
                        fields[name] = value
                    elif fields:
                        fields["data"] = json.loads(fields["data"])
                        self.messages.append(fields)
                        fields = {}
                    if self.done.is_set():
                        return
        except httpx.HTTPError:
            return  # the server stopped

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("event") == kind]

    def close(self) -> None:
        self.done.set()
        self._http.close()


def test_call_output_streams_live_while_the_call_runs(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    (tmp_path / "agents").mkdir()
    write_json(tmp_path / "agents" / "build.json", {
        "slug": "build",
        "provider": {"tag": "scripted", "responses": [
            {"tool_calls": [{"id": "c1", "name": "build", "arguments": {"steps": 3}}]},
            {"text": "done: {{result:c1}}"}]},
        "tools": [{"name": "build", "parameters": {"type": "object"}}],
        "toolCallPolicyConfig": {"default": {"tag": "runIsolated", "spec": {
            "tag": "localProcess", "argv": [sys.executable, "-S", str(WORKER), str(gate)],
            "timeoutSeconds": 300}}},
    })  # fmt: skip
    served = start_serve(str(tmp_path / "state.db"), tmp_path, "--no-auth", "--agents", "agents",
                         "--poll-seconds", "0.05")  # fmt: skip
    everything = Listener(served.url, "/v1/events")
    try:
        wait_for(lambda: everything.comments, what="the stream subscribed")
        with served.client() as http:
            made = http.post(
                "/v1/sessions", json={"agent": "build.json", "prompt": "go", "run": "none"}
            )  # the worker runs it
            assert made.status_code == 201, made.text
            sid = made.json()["session_id"]
            # The worker has streamed its 6 events and waits for the gate: still running.
            wait_for(lambda: len(everything.of_kind("call.output")) == 6, what="6 events")
            assert http.get(f"/v1/sessions/{sid}").json()["calls"]["c1"]["state"] == "running"
            live = everything.of_kind("call.output")
            assert all("id" not in m for m in live)  # not in the log: no id
            first = live[0]["data"]
            assert (first["kind"], first["session_id"], first["call_id"], first["tool"],
                    first["attempt"]) == ("call.output", sid, "c1", "build", 1)  # fmt: skip
            events = [m["data"]["event"] for m in live]
            assert [e["seq"] for e in events] == [1, 2, 3, 4, 5, 6]
            progress = [e for e in events if e["type"] == "progress"]
            assert [p["fraction"] for p in progress] == [1 / 3, 2 / 3, 1.0]
            assert progress[-1]["text"] == "step 3 of 3"
            logs = [e for e in events if e["type"] == "log"]
            assert [(e["stream"], e["text"]) for e in logs] == [
                ("stdout", "line 1"), ("stdout", "line 2"), ("stdout", "line 3")]  # fmt: skip
            assert all(e["call_id"] == "c1" for e in events)

            gate.touch()
            document = wait_for_status(http, sid, "completed")
        output = document["calls"]["c1"]["output"]
        assert (output["delivered"], output["invalid"]) == (6, 1)
        assert output["progress"]["text"] == "step 3 of 3"
        # The log's events kept their ids; a replay from the log has no output.
        logged = [m for m in everything.messages if m.get("event") != "call.output"]
        assert logged and all("id" in m for m in logged)
        replay = Listener(served.url, f"/v1/sessions/{sid}/events")
        try:
            wait_for(lambda: replay.of_kind("session.completed"), what="the replay")
            assert replay.of_kind("call.output") == []
            assert replay.of_kind("call.completed")[0]["data"]["call_id"] == "c1"
        finally:
            replay.close()
    finally:
        everything.close()
        assert served.stop() == 0, served.stderr()
