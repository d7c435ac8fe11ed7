"""Files in and out (envelope 1.1) through LocalProcessRunner: input files checked before
any worker starts, and the media paths a worker sends back re-checked by the runner.
The same battery runs through Docker and the warm pool in tests/docker/test_files_events.py."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import anyio
import pytest

from envelopes.v1 import InputFile, ToolCallRequest
from runner.isolation import FileLimits, LocalProcessRunner
from runner.isolation.base import ExchangeRunner
from tests.conftest import WORKERS, make_request

pytestmark = pytest.mark.anyio

EVENTS_WORKER = WORKERS / "events_worker.py"

#: Names the path rules refuse, each with what the refusal says.
TRAVERSALS = [
    ("../escape", "'..' component"),
    ("a/../../escape", "'..' component"),
    ("/etc/passwd", "absolute"),
    ("./here", "'.' component"),
    ("a//b", "empty component"),
    ("trailing/", "empty component"),
    ("nul\x00byte", "control character"),
    ("esc\x1b[2J", "control character"),
    ("back\\slash", "backslash"),
    ("bidi\u202etxt.exe", "bidirectional"),
    ("x" * 256, "over 255 bytes"),
    ("/".join(["d"] * 600), "over 1024"),
]


def unchecked_request(*files: InputFile, request: ToolCallRequest | None = None) -> ToolCallRequest:
    """A request carrying `files` that skipped the model's own checks (as a caller's bug
    or a hand-made object would): the runner must check them itself."""
    base = request or make_request("run")
    return base.model_copy(update={"version": "1.1", "files": list(files)})


def raw_file(path: str, content: str = "x", encoding: str = "utf-8") -> InputFile:
    return InputFile.model_construct(path=path, content=content, encoding=encoding, mode=0o644)


def recording(record: Path, *args: str, **kwargs) -> LocalProcessRunner:
    return LocalProcessRunner([sys.executable, str(EVENTS_WORKER), f"--record={record}", *args],
                              **kwargs)  # fmt: skip


async def assert_refused_before_start(
    runner: ExchangeRunner, request: ToolCallRequest, expected: str, record: Path | None = None
) -> None:
    outcome = await runner.call(request)
    assert outcome.error_code == "INVALID_REQUEST", outcome.result
    assert outcome.result.error is not None
    message = outcome.result.error.message
    assert expected in message and "no worker was started" in message, message
    assert outcome.runner_info == {"started": False}
    if record is not None:
        assert not await anyio.Path(record).exists(), "a worker was started (it read a request)"


@pytest.mark.parametrize(
    ("name", "expected"), TRAVERSALS, ids=[repr(t[0])[:30] for t in TRAVERSALS]
)
async def test_bad_input_file_names_are_refused_before_any_worker_starts(
    name: str, expected: str, tmp_path: Path
):
    record = tmp_path / "seen.jsonl"
    request = unchecked_request(raw_file("fine.txt"), raw_file(name))
    await assert_refused_before_start(recording(record), request, "files[1].path: ", record)
    await assert_refused_before_start(recording(record), request, expected, record)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ([raw_file("a.txt"), raw_file("a.txt")], "files[1].path: the same path as files[0]"),
        ([raw_file("Data.CSV"), raw_file("data.csv")], "files[1].path: the same path"),
        ([raw_file("caf\u00e9"), raw_file("cafe\u0301")], "files[1].path: the same path"),
        ([raw_file("dir"), raw_file("dir/inner.txt")], "files[0].path: is a parent directory"),
        ([raw_file("b.bin", "not base64!", "base64")], "files[0].content: not"),
        ([raw_file("b.bin", "YWJj", "rot13")], "files[0].encoding"),
    ],
)
async def test_conflicting_or_undecodable_input_files_are_refused(files, expected, tmp_path):
    record = tmp_path / "seen.jsonl"
    await assert_refused_before_start(recording(record), unchecked_request(*files), expected,
                                      record)  # fmt: skip


async def test_file_limits_cap_count_and_bytes(tmp_path: Path):
    record = tmp_path / "seen.jsonl"
    limits = FileLimits(max_files=2, max_bytes=10)
    runner = recording(record, file_limits=limits)
    three = unchecked_request(raw_file("1"), raw_file("2"), raw_file("3"))
    await assert_refused_before_start(runner, three, "3 files, over the limit of 2", record)
    big = unchecked_request(raw_file("big", "y" * 11))
    await assert_refused_before_start(runner, big, "over 10 bytes", record)
    with pytest.raises(ValueError, match="max_files"):
        FileLimits(max_files=65)  # the wire's cap is a ceiling


async def test_input_files_reach_the_worker_and_come_back_with_their_paths(tmp_path: Path):
    record = tmp_path / "seen.jsonl"
    doc = make_request("run").to_wire() | {"version": "1.1"}
    doc["files"] = [
        {"path": "data/in.csv", "content": "a,b\n1,2\n"},
        {"path": "bin/blob", "content": "AAEC/w==", "encoding": "base64", "mode": 0o755},
    ]
    request = ToolCallRequest.model_validate(doc)
    outcome = await recording(record).call(request)
    assert outcome.ok, outcome.result
    sent = json.loads(record.read_text().splitlines()[-1])
    assert sent["version"] == "1.1" and [f["path"] for f in sent["files"]] == [
        "data/in.csv", "bin/blob"
    ]  # fmt: skip
    parts = outcome.result.to_wire()["output"]["parts"]
    assert [(p.get("path"), p.get("base64_data")) for p in parts[1:]] == [
        ("data/in.csv", "YSxiCjEsMgo="), ("bin/blob", "AAEC/w==")
    ]  # fmt: skip


def media_worker(*paths: str, options: tuple[str, ...] = ()) -> LocalProcessRunner:
    argv = [sys.executable, str(EVENTS_WORKER), *options, "media", json.dumps(list(paths))]
    return LocalProcessRunner(argv)


#: What a hostile worker may send back as media paths, and which part is refused (part 0
#: is the worker's own text).
HOSTILE_MEDIA = [
    (["../../etc/cron.d/evil"], 1),
    (["/etc/passwd"], 1),
    (["ok.txt", "a/./b"], 2),
    (["ok.txt", "x\x1b]0;title\x07"], 2),
    (["ok.txt", "evil\u202etxt.sh"], 2),
    (["ok.txt", "back\\slash"], 2),
    (["Report.txt", "report.TXT"], 2),
    (["d/" * 600 + "f"], 1),
]


def names_part(message: str, index: int) -> bool:
    """Whether a refusal names `output.parts[index].path` (the runner's own check) or
    the same place as the models locate it (`output.mixed.parts.2.media.path`)."""
    return (
        re.search(rf"output\.(mixed\.)?parts(\[{index}\]|\.{index}\.media)\.path", message)
        is not None
    )


@pytest.mark.parametrize(
    ("paths", "index"), HOSTILE_MEDIA, ids=[repr(p)[:40] for p, _ in HOSTILE_MEDIA]
)
async def test_hostile_media_paths_get_malformed_output_naming_the_part(paths, index):
    outcome = await media_worker(*paths).call(make_request("run"), lambda e: None)
    assert outcome.error_code == "MALFORMED_OUTPUT", outcome.result
    assert outcome.result.error is not None
    assert names_part(outcome.result.error.message, index), outcome.result.error.message


async def test_more_media_paths_than_collect_allows_is_malformed():
    doc = make_request("run").to_wire() | {"version": "1.1"}
    doc["collect"] = {"patterns": ["*"], "max_files": 2}
    outcome = await media_worker("a", "b", "c").call(ToolCallRequest.model_validate(doc))
    assert outcome.error_code == "MALFORMED_OUTPUT"
    assert outcome.result.error is not None
    assert "output.parts[3].path: more than max_files=2" in outcome.result.error.message
    unbounded = await media_worker(*(f"f{i}" for i in range(65))).call(make_request("run"),
                                                                      lambda e: None)  # fmt: skip
    assert unbounded.error_code == "MALFORMED_OUTPUT"  # 64 without collect


async def test_more_media_bytes_than_collect_allows_is_malformed():
    doc = make_request("run").to_wire() | {"version": "1.1"}
    doc["collect"] = {"patterns": ["*"], "max_bytes": 3}
    outcome = await media_worker("a", "b").call(ToolCallRequest.model_validate(doc))
    assert outcome.error_code == "MALFORMED_OUTPUT"  # each part is 2 bytes ("hi")
    assert outcome.result.error is not None
    assert "output.parts[2].path: over max_bytes=3" in outcome.result.error.message


async def test_a_path_in_a_1_0_result_is_malformed():
    outcome = await media_worker("fine.txt", options=("--v10",)).call(make_request("run"))
    assert outcome.error_code == "MALFORMED_OUTPUT"
    assert outcome.result.error is not None
    assert "output.parts[1].path" in outcome.result.error.message
