"""The worker SDK's 1.1: capabilities in describe, input files in a fresh workspace,
`collect` as media parts, `request.emit` events on fd 2, and the same answers on the fast
path and through the models."""

from __future__ import annotations

import base64
import copy
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envelopes import codec, events, wire
from envelopes.v1 import (
    DescribeResult,
    JsonOutput,
    MixedOutput,
    TextOutput,
    ToolCallResult,
)
from envelopes.worker import ToolError, Worker

REPO = Path(__file__).resolve().parents[2]
SEEN: list[dict[str, Any]] = []


def build() -> Worker:
    worker = Worker("w", "1.0")

    @worker.tool("t", description="", input_schema={"type": "object"}, effects="none")
    def t(arguments: dict, request: Any) -> Any:
        here = os.getcwd()
        SEEN.append({"cwd": here, "workspace": request.workspace})
        listing = {}
        for top, _, names in os.walk("."):
            for name in names:
                path = os.path.join(top, name)[2:]
                mode = stat.S_IMODE(os.lstat(path).st_mode)
                listing[path] = [Path(path).read_bytes().decode("latin-1"), oct(mode)]
        for path, text in arguments.get("write", {}).items():
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            Path(path).write_text(text)
        for link, target in arguments.get("links", {}).items():
            os.symlink(target, link)
        request.emit.log("working")
        request.emit.progress(0.5, "half")
        if arguments.get("fail"):
            raise ToolError("TOOL_FAILED", "asked to fail")
        if arguments.get("mixed"):
            return MixedOutput(parts=[TextOutput(content="own"), JsonOutput(content=listing)])
        return listing

    return worker


def call(**fields: Any) -> dict[str, Any]:
    doc = {
        "kind": "ToolCallRequest",
        "version": "1.1",
        "id": "c1",
        "tool": {"name": "t"},
        "arguments": fields.pop("arguments", {}),
        "deadline_ms": 2**52,
        "limits": {"max_result_bytes": fields.pop("max_result_bytes", 1 << 20)},
    }
    doc.update(fields)
    return doc


def answer(doc: dict[str, Any], worker: Worker | None = None) -> ToolCallResult:
    result = (worker or build()).handle(wire.dumps(doc))
    assert isinstance(result, ToolCallResult)
    return result


@pytest.fixture(autouse=True)
def workspace_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    SEEN.clear()
    return tmp_path


# --- describe ------------------------------------------------------------------------


def test_a_1_1_describe_lists_the_capabilities_and_a_1_0_one_does_not() -> None:
    worker = build()
    newer = worker.handle(b'{"kind":"DescribeRequest","version":"1.1"}')
    older = worker.handle(b'{"kind":"DescribeRequest","version":"1.0"}')
    assert isinstance(newer, DescribeResult) and isinstance(older, DescribeResult)
    assert (newer.version, newer.capabilities) == ("1.1", ["files", "events"])
    assert (older.version, older.capabilities) == ("1.0", None)
    assert newer.supported_versions == older.supported_versions == ["1.0", "1.1"]
    assert (
        b"capabilities" not in worker.answer(b'{"kind":"DescribeRequest","version":"1.0"}').payload
    )


def test_capabilities_can_be_declined_and_a_1_0_worker_refuses_1_1() -> None:
    none = Worker("w", "1", capabilities=())
    described = none.handle(b'{"kind":"DescribeRequest","version":"1.1"}')
    assert isinstance(described, DescribeResult) and described.capabilities is None
    old = Worker("w", "1", supported_versions=("1.0",))
    refused = old.handle(b'{"kind":"DescribeRequest","version":"1.1"}')
    assert isinstance(refused, ToolCallResult) and refused.error is not None
    assert refused.error.code == "UNSUPPORTED_VERSION"


# --- files in, workspace -------------------------------------------------------------


def test_input_files_are_in_a_fresh_workspace_that_is_removed(workspace_base: Path) -> None:
    blob = base64.b64encode(b"\x00\xff").decode()
    result = answer(
        call(
            files=[
                {"path": "data/in.csv", "content": "a,b\n"},
                {"path": "bin/blob", "content": blob, "encoding": "base64", "mode": 0o700},
            ]
        )
    )
    assert result.status == "ok" and isinstance(result.output, JsonOutput)
    assert result.output.content == {
        "data/in.csv": ["a,b\n", "0o644"],
        "bin/blob": ["\x00\xff", "0o700"],
    }
    (seen,) = SEEN
    assert seen["cwd"] == seen["workspace"]
    assert Path(seen["workspace"]).parent == workspace_base
    assert not os.path.exists(seen["workspace"])
    assert os.getcwd() != seen["workspace"]


def test_every_call_gets_its_own_workspace() -> None:
    worker = build()
    answer(call(), worker)
    answer(call(version="1.0"), worker)
    assert SEEN[0]["workspace"] != SEEN[1]["workspace"]
    assert all(not os.path.exists(s["workspace"]) for s in SEEN)


def test_a_1_0_request_ignores_1_1_members() -> None:
    result = answer(
        call(
            version="1.0",
            files=[{"path": "../../escape", "content": "x"}],  # not even checked
            collect={"patterns": ["*"]},
            events={},
        )
    )
    assert result.version == "1.0" and result.status == "ok"
    assert isinstance(result.output, JsonOutput) and result.output.content == {}


@pytest.mark.parametrize(
    ("files", "why"),
    [
        ([{"path": "../x", "content": ""}], "files.0.path"),
        ([{"path": "a", "content": ""}, {"path": "A", "content": ""}], "duplicates"),
        ([{"path": "a", "content": ""}, {"path": "a/b", "content": ""}], "inside"),
        ([{"path": "a", "content": "!", "encoding": "base64"}], "base64"),
        ([{"path": "a", "content": "", "mode": 0o4755}], "mode"),
    ],
)
def test_bad_files_are_invalid_request_and_the_tool_never_runs(files: list, why: str) -> None:
    result = answer(call(files=files))
    assert result.error is not None and result.error.code == "INVALID_REQUEST"
    assert why in result.error.message
    assert SEEN == []


def test_bad_collect_and_events_are_invalid_request() -> None:
    for doc in (
        call(collect={"patterns": ["../*"]}),
        call(collect={"patterns": []}),
        call(collect={"patterns": ["*"], "max_files": 0}),
        call(events={"max_per_second": 0}),
        call(events={"max_bytes": 9 << 20}),
    ):
        result = answer(doc)
        assert result.error is not None and result.error.code == "INVALID_REQUEST", doc
    assert SEEN == []


# --- collect -------------------------------------------------------------------------


def test_collect_returns_media_parts_after_the_tools_own_output(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    arguments = {
        "write": {"out/chart.svg": "<svg/>", "out/report.txt": "r", "out/odd name!.txt": "o"},
        "links": {"out/leak.txt": str(secret)},
    }
    result = answer(call(arguments=arguments, collect={"patterns": ["out/*"]}))
    assert result.version == "1.1" and isinstance(result.output, MixedOutput)
    own, *media, skipped = result.output.parts
    assert isinstance(own, JsonOutput) and own.content == {}
    assert [(m.path, m.filename, m.mime_type, base64.b64decode(m.base64_data)) for m in media] == [
        ("out/chart.svg", "chart.svg", "image/svg+xml", b"<svg/>"),
        ("out/odd name!.txt", None, "text/plain", b"o"),  # `!` is not in FILENAME_PATTERN
        ("out/report.txt", "report.txt", "text/plain", b"r"),
    ]
    assert skipped == TextOutput(content="skipped: out/leak.txt: a symbolic link (not followed)")


def test_a_mixed_output_keeps_its_parts_first() -> None:
    arguments = {"mixed": True, "write": {"a.txt": "A"}}
    result = answer(call(arguments=arguments, collect={"patterns": ["*.txt"]}))
    assert isinstance(result.output, MixedOutput)
    assert [p.type for p in result.output.parts] == ["text", "json", "media"]
    assert result.output.parts[2].path == "a.txt"  # type: ignore[union-attr]


def test_collect_over_its_caps_is_limit_exceeded() -> None:
    write = {f"f{i}.txt": "x" * 100 for i in range(3)}
    for collect, max_result, message in (
        ({"patterns": ["*.txt"], "max_files": 2}, 1 << 20, "max_files=2"),
        ({"patterns": ["*.txt"], "max_bytes": 250}, 1 << 20, "max_bytes=250"),
        ({"patterns": ["*.txt"]}, 300, "over max_result_bytes=300"),
    ):
        result = answer(call(arguments={"write": write}, collect=collect,
                             max_result_bytes=max_result))  # fmt: skip
        assert result.error is not None and result.error.code == "LIMIT_EXCEEDED"
        assert message in result.error.message
    assert all(not os.path.exists(s["workspace"]) for s in SEEN)


def test_a_failing_tool_collects_nothing_and_still_cleans_up() -> None:
    result = answer(call(arguments={"fail": True, "write": {"a.txt": "A"}},
                         collect={"patterns": ["*"]}))  # fmt: skip
    assert result.error is not None and result.error.code == "TOOL_FAILED"
    assert not os.path.exists(SEEN[0]["workspace"])


# --- fast path and models agree ------------------------------------------------------

REQUESTS = [
    call(files=[{"path": "x/y", "content": "hi", "mode": 0o600}], collect={"patterns": ["**"]}),
    call(files=[{"path": "a", "content": "QUI=", "encoding": "base64"}]),
    call(files=[{"path": "a", "content": "x"}, {"path": "a", "content": "y"}]),
    call(files=[{"path": "Ab", "content": "x"}, {"path": "aB", "content": "y"}]),
    call(files=[{"path": "a", "content": "x"}, {"path": "a/b", "content": "y"}]),
    call(files=[{"path": "a\u202e", "content": "x"}]),
    call(files=[{"path": "a", "content": "x", "encoding": "latin-1"}]),
    call(files=[{"path": "a", "content": "YQ", "encoding": "base64"}]),
    call(files=[{"path": "a", "content": "x", "mode": True}]),
    call(files=[{"path": f"f{i}", "content": ""} for i in range(65)]),
    call(files="nope"),
    call(collect={"patterns": ["a/[bc]"]}),
    call(collect={"patterns": ["*"], "max_bytes": (64 << 20) + 1}),
    call(collect={"patterns": ["*"], "extra": 1}, events={"max_per_second": 1000}),
    call(events={"max_per_second": 1001}),
    call(events=[]),
    call(version="1.0", files=[{"path": "/abs", "content": ""}]),
    call(arguments={"write": {"o.txt": "o"}}, collect={"patterns": ["o.txt"]}),
    call(arguments={"mixed": True}, collect={"patterns": ["none"]}),
]


@pytest.mark.parametrize("doc", REQUESTS, ids=lambda d: wire.dumps(d)[80:160].decode())
def test_fast_and_slow_paths_answer_1_1_alike(
    doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = wire.dumps(doc)
    fast = build().answer(data)
    with monkeypatch.context() as patch:
        patch.setattr("envelopes.worker.check_call", lambda doc: None)
        patch.setattr("envelopes.worker._fast_output", _always_slow)
        slow = build().answer(data)
    assert fast.payload == slow.payload
    assert fast.failed is slow.failed


def _always_slow(value: Any) -> Any:
    from envelopes.worker import _Slow

    raise _Slow


def test_the_fast_path_vouches_for_good_1_1_requests() -> None:
    from envelopes.worker_request import check_call

    view = check_call(copy.deepcopy(REQUESTS[0]) | {"events": {}})
    assert view is not None
    assert [f.path for f in view.files] == ["x/y"] and view.files[0].encoding == "utf-8"
    assert view.collect.patterns == ["**"] and view.collect.max_files == 64
    assert view.events.max_per_second == 20 and view.events.max_bytes == 1 << 20
    assert view.emit is events.NULL and view.workspace is None


# --- events --------------------------------------------------------------------------


def test_emit_is_a_no_op_without_events(capfd: pytest.CaptureFixture[str]) -> None:
    answer(call())
    assert "\x1e" not in capfd.readouterr().err


def test_emit_writes_framed_events_on_fd_2(capfd: pytest.CaptureFixture[bytes]) -> None:
    answer(call(events={"max_per_second": 100}))
    err = capfd.readouterr().err
    lines = [line + "\n" for line in err.split("\n") if line.startswith("\x1e")]
    assert [events.parse_line(line.encode()) for line in lines] == [
        {"type": "log", "stream": "stderr", "text": "working"},
        {"type": "progress", "fraction": 0.5, "message": "half"},
    ]


WORKER_SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
from envelopes.worker import Worker
worker = Worker("w", "1")

@worker.tool("t", description="", input_schema={{"type": "object"}}, effects="none")
def t(arguments, request):
    print("a plain print")
    for n in range(3):
        request.emit.log(f"step {{n}}")
    request.emit.partial("par")
    request.emit.partial("tial")
    return open("in.txt").read()

worker.serve()
"""


def test_a_served_call_keeps_stdout_to_one_document_and_frames_events(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT.format(repo=str(REPO)))
    doc = call(files=[{"path": "in.txt", "content": "from a file"}], events={})
    proc = subprocess.run([sys.executable, "-I", str(script)], input=wire.dumps(doc),
                          capture_output=True, timeout=60,
                          env={"TMPDIR": str(tmp_path)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = codec.decode_result(proc.stdout, codec.decode_request(wire.dumps(doc)))  # type: ignore[arg-type]
    assert result.output == TextOutput(content="from a file")
    lines = proc.stderr.splitlines(keepends=True)
    assert b"a plain print\n" in lines
    parsed = [events.parse_line(line) for line in lines if line.startswith(b"\x1e")]
    # Five events, within the burst (20 a second // 2): each goes at once, uncoalesced.
    assert parsed == [
        *({"type": "log", "stream": "stderr", "text": f"step {n}"} for n in range(3)),
        {"type": "partial", "text": "par"},
        {"type": "partial", "text": "tial"},
    ]
    assert [p for p in tmp_path.iterdir() if p.name.startswith("agents-runner-ws-")] == []


def test_a_1_1_call_imports_nothing_heavy(tmp_path: Path) -> None:
    from tests.envelopes.test_worker_fast import HEAVY

    doc = call(arguments={"script": "mkdir out; cat in.txt > out/a.txt; echo hi"},
               files=[{"path": "in.txt", "content": "x"}, {"path": "b", "content": "QQ==",
                                                           "encoding": "base64"}],
               collect={"patterns": ["out/*.txt"]}, events={})  # fmt: skip
    doc["tool"] = {"name": "bash"}
    worker_py = REPO / "images" / "bash-runner" / "worker.py"
    program = (
        "import sys\n"
        f"sys.path[:0] = [{str(REPO)!r}, {str(REPO / 'images' / 'common')!r}]\n"
        f"sys.argv = [{str(worker_py)!r}]\n"
        "loaded = set(sys.modules)\n"
        "module = {'__name__': 'worker_under_test'}\n"
        "exec(compile(open(sys.argv[0]).read(), sys.argv[0], 'exec'), module)\n"
        f"answer = module['worker'].answer({wire.dumps(doc)!r})\n"
        "heavy = sorted(m.split('.')[0] for m in set(sys.modules) - loaded)\n"
        "print(answer.failed, heavy)\n"
        "print(answer.payload.decode())\n"
    )
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", program], capture_output=True,
                          text=True, timeout=60, env={"TMPDIR": str(tmp_path)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    first, payload = proc.stdout.split("\n", 1)
    assert first.startswith("False "), proc.stdout
    imported = set(first[len("False ") :].strip("[]").replace("'", "").split(", "))
    assert imported.isdisjoint(HEAVY), imported
    assert '"path":"out/a.txt"' in payload and '"base64_data":"eA=="' in payload
