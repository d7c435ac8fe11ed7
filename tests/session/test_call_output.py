"""The events an isolated call's worker streams (envelope 1.1): published live while the
call runs, their end kept with the call, stored by the commit that stores its result,
shown by `session show` in another process. The worker is tests/session/streaming_worker.py
through the real local runner, on a real SQLite file."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import anyio
import anyio.to_thread

from runner.isolation.events import WorkerEvent
from runner.session import parse_agent, with_durable_workflows
from runner.session.output import (
    KEPT_EVENTS,
    KEPT_TEXT_BYTES,
    CallOutputBus,
    LiveOutput,
    OutputTail,
)
from runner.stores import SQLiteStore
from tests.session.conftest import agent_doc, calls

WORKER = Path(__file__).with_name("streaming_worker.py")
CLI = [sys.executable, "-m", "runner.cli"]


def streaming_agent(*argv: str, steps: int = 3, **extra: object) -> dict:
    spec = {"tag": "localProcess", "argv": [sys.executable, "-S", str(WORKER), *argv]}
    policy = {"default": {"tag": "runIsolated", "spec": spec}}
    return agent_doc([calls(("c", "build"), steps=steps), {"text": "got {{result:c}}"}],
                     ["build"], policy, **extra)  # fmt: skip


def test_a_call_keeps_what_its_worker_streamed_and_a_restart_still_has_it(tmp_path):
    heard: list[LiveOutput] = []
    bus = CallOutputBus()
    bus.subscribe(heard.append)
    with SQLiteStore(tmp_path / "state.db") as store:
        agent = replace(with_durable_workflows(parse_agent(streaming_agent()), store),
                        call_output=bus)  # fmt: skip
        report = anyio.run(agent.run, "build it")
        sid = report.session.id
        assert report.session.final_answer == "got built 3 step(s)"
        commits_with_output = store.commits
    # Heard live, in order, each with the session and call it belongs to.
    assert [(h.session_id, h.call_id, h.tool, h.attempt) for h in heard] == [
        (sid, "c", "build", 1)
    ] * 6
    assert [h.event.seq for h in heard] == [1, 2, 3, 4, 5, 6]
    assert [h.event.text for h in heard if h.event.type == "log"] == ["line 1", "line 2", "line 3"]
    assert heard[-2].event.fraction == 1.0 and heard[-2].event.text == "step 3 of 3"
    assert heard[0].to_json()["event"]["call_id"] == "c"  # the session's id, not the token
    # Another store object on the same file (a restart) reads the same record.
    with SQLiteStore(tmp_path / "state.db") as reopened:
        call = reopened.load(sid).calls["c"]
    output = call.output
    assert output is not None and call.state == "completed"
    assert (output.attempt, output.delivered, output.dropped, output.invalid) == (1, 6, 0, 1)
    assert [e.text for e in output.events if e.type == "log"] == ["line 1", "line 2", "line 3"]
    assert output.progress is not None and output.progress.fraction == 1.0
    assert output.progress.text == "step 3 of 3"
    assert commits_with_output > 0


def test_streaming_costs_no_commit_of_its_own(tmp_path):
    """The same session with 3 steps and with 8: as many commits (issue 15's count)."""
    counts = []
    for steps in (3, 8):  # 16 events at most: within the default budget's burst of 20
        with SQLiteStore(tmp_path / f"{steps}.db") as store:
            agent = with_durable_workflows(parse_agent(streaming_agent(steps=steps)), store)
            sid = agent.start("go").id
            before = store.commits
            assert anyio.run(agent.resume, sid).status == "completed"
            assert store.load(sid).calls["c"].output.delivered == 2 * steps
            counts.append(store.commits - before)
    assert counts[0] == counts[1]


def test_a_worker_without_events_leaves_no_output(tmp_path):
    worker = tmp_path / "worker.py"  # a 1.0 worker: it answers every document alike
    worker.write_text(
        "import json, sys\nr = json.loads(sys.stdin.read())\n"
        "print(json.dumps({'kind': 'ToolCallResult', 'version': '1.0', 'id': r['id'],"
        " 'status': 'ok', 'output': {'type': 'text', 'content': 'plain'}}))\n"
    )
    spec = {"tag": "localProcess", "argv": [sys.executable, str(worker)]}
    document = agent_doc([calls(("c", "echo")), {"text": "{{result:c}}"}], ["echo"],
                         {"default": {"tag": "runIsolated", "spec": spec}})  # fmt: skip
    heard: list[LiveOutput] = []
    bus = CallOutputBus()
    bus.subscribe(heard.append)
    with SQLiteStore(tmp_path / "state.db") as store:
        agent = replace(with_durable_workflows(parse_agent(document), store), call_output=bus)
        report = anyio.run(agent.run, "go")
        assert report.session.final_answer == "plain"
        assert store.load(report.session.id).calls["c"].output is None
    assert heard == []


def test_a_step_that_gives_up_on_a_call_stores_what_it_streamed_so_far(tmp_path):
    """The worker streams, then waits for a gate that never opens; the step yields after
    its timeout, the call goes back to ready, and that commit carries its output."""
    gate = tmp_path / "never"
    document = streaming_agent(str(gate), asyncYieldStrategy={"tag": "yieldOnTimeout",
                                                              "milliseconds": 3000})  # fmt: skip
    with SQLiteStore(tmp_path / "state.db") as store:
        agent = with_durable_workflows(parse_agent(document), store)
        sid = agent.start("go").id
        assert anyio.run(agent.step, sid).action == "llm_turn"
        assert anyio.run(agent.step, sid).action == "ran_calls"
        call = store.load(sid).calls["c"]
    assert call.state == "ready" and call.output is not None
    assert [e.text for e in call.output.events if e.type == "log"] == ["line 1", "line 2", "line 3"]


def test_session_show_prints_the_kept_output_from_another_process(tmp_path):
    (tmp_path / "agent.json").write_text(json.dumps(streaming_agent()))

    def cli(*args: str) -> str:
        done = subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=tmp_path,
                              timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        return done.stdout

    started = json.loads(cli("session", "start", "--agent-file", "agent.json", "--prompt", "go",
                             "--json"))  # fmt: skip
    sid = started["session_id"]
    cli("session", "resume", sid)
    shown = cli("session", "show", sid)
    assert "output of c (attempt 1; 6 event(s), 0 dropped, 1 invalid;" in shown
    assert "progress 100% step 3 of 3" in shown
    assert "stdout| line 3" in shown
    document = json.loads(cli("session", "show", sid, "--json"))
    output = document["calls"]["c"]["output"]
    assert output["delivered"] == 6 and output["progress"]["text"] == "step 3 of 3"
    assert [e["text"] for e in output["events"] if e["type"] == "log"] == [
        "line 1", "line 2", "line 3"]  # fmt: skip


# --- the bounds ------------------------------------------------------------------------


def event(
    seq: int, kind: str = "log", text: str = "", fraction: float | None = None
) -> WorkerEvent:
    stream = "stdout" if kind == "log" else None
    return WorkerEvent("token", seq, 1000 + seq, kind, text, stream, fraction)  # type: ignore[arg-type]


def test_the_tail_keeps_the_last_events_and_the_latest_progress():
    tail = OutputTail(2)
    tail.add(event(1, "progress", "half", 0.5))
    for seq in range(2, 2 + 3 * KEPT_EVENTS):
        tail.add(event(seq, text=f"line {seq}"))
    record = tail.record(dropped=4, invalid=1)
    assert record is not None and record.attempt == 2
    assert [e.seq for e in record.events] == list(range(2 + 2 * KEPT_EVENTS, 2 + 3 * KEPT_EVENTS))
    assert record.progress is not None and record.progress.fraction == 0.5  # older, still kept
    assert (record.delivered, record.dropped, record.invalid) == (1 + 3 * KEPT_EVENTS, 4, 1)


def test_the_tail_keeps_at_most_its_bytes_of_text_ending_with_the_newest():
    tail = OutputTail(1)
    tail.add(event(1, text="a" * 5000))
    tail.add(event(2, text="é" * 3000))  # 6000 bytes: the first no longer fits beside it
    record = tail.record()
    assert [e.seq for e in record.events] == [2]
    tail.add(event(3, text="x" * (KEPT_TEXT_BYTES + 10) + "end"))
    [last] = tail.record().events
    assert last.text.endswith("end") and len(last.text.encode()) == KEPT_TEXT_BYTES


def test_events_the_outcome_kept_fill_in_what_the_callback_missed():
    tail = OutputTail(1)
    tail.add(event(1, text="one"))
    tail.absorb([event(1, text="one"), event(2, text="two")])
    assert [e.text for e in tail.record().events] == ["one", "two"]
    assert OutputTail(1).record() is None


def test_a_listener_that_fails_never_reaches_the_call_nor_the_others(caplog):
    bus, heard = CallOutputBus(), []

    def broken(item: LiveOutput) -> None:
        raise RuntimeError("boom")

    bus.subscribe(broken)
    unsubscribe = bus.subscribe(heard.append)
    item = LiveOutput("s", "c", "build", 1, event(1, text="x"))
    bus.publish(item)
    unsubscribe()
    bus.publish(item)
    assert heard == [item] and "a listener failed" in caplog.text


def test_a_listener_on_another_loop_hears_there():
    """The server's loop may not be the one the call runs on: its listener is called
    in its own loop's thread (call_soon_threadsafe)."""
    bus = CallOutputBus()
    heard: list[tuple[int, int]] = []
    loop_thread: list[int] = []
    ready, done = threading.Event(), threading.Event()

    def hear(item: LiveOutput) -> None:
        heard.append((item.event.seq, threading.get_ident()))
        if len(heard) == 2:
            done.set()

    async def listen() -> None:
        loop_thread.append(threading.get_ident())
        bus.subscribe(hear)
        ready.set()
        await anyio.to_thread.run_sync(done.wait, 30)

    thread = threading.Thread(target=anyio.run, args=(listen,))
    thread.start()
    assert ready.wait(10)

    async def publish() -> None:
        bus.publish(LiveOutput("s", "c", "build", 1, event(1)))
        bus.publish(LiveOutput("s", "c", "build", 1, event(2)))

    anyio.run(publish)
    thread.join(10)
    assert heard == [(1, loop_thread[0]), (2, loop_thread[0])]
    assert loop_thread[0] != threading.get_ident()
