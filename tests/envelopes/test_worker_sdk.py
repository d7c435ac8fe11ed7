"""envelopes.worker.Worker: in process through handle(), and end to end through run()."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest

from envelopes import codec, wire
from envelopes.v1 import (
    DescribeRequest,
    DescribeResult,
    JsonOutput,
    MediaOutput,
    RequestLimits,
    TextOutput,
    ToolCallRequest,
    ToolCallResult,
    ToolRef,
)
from envelopes.worker import ToolError, Worker

REPO = Path(__file__).resolve().parents[2]

GREET_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name"],
    "additionalProperties": False,
}


def build_worker() -> Worker:
    worker = Worker("test-worker", "2.1.0")
    free = {"type": "object"}

    @worker.tool("greet", description="Say hello", input_schema=GREET_SCHEMA, effects="none")
    def greet(arguments: dict, request: ToolCallRequest) -> str:
        return f"hello {arguments['name']}"

    @worker.tool("add", description="Add", input_schema=free, effects="none")
    def add(arguments: dict, request: ToolCallRequest) -> dict:
        return {"sum": arguments["a"] + arguments["b"], "id": request.id}

    @worker.tool("media", description="", input_schema=free, effects="contained")
    def media(arguments: dict, request: ToolCallRequest) -> MediaOutput:
        return MediaOutput(mime_type="image/png", base64_data="QUJD", filename="a.png")

    @worker.tool("deny", description="", input_schema=free, effects="external")
    def deny(arguments: dict, request: ToolCallRequest) -> None:
        raise ToolError("UNAVAILABLE", "backend down", retryable=True)

    @worker.tool("crash", description="", input_schema=free, effects="none")
    def crash(arguments: dict, request: ToolCallRequest) -> None:
        raise RuntimeError("kaput")

    @worker.tool("big", description="", input_schema=free, effects="none")
    def big(arguments: dict, request: ToolCallRequest) -> str:
        return "x" * arguments["n"]

    @worker.tool("value", description="", input_schema=free, effects="none")
    def value(arguments: dict, request: ToolCallRequest) -> object:
        return UNSENDABLE[arguments["case"]]()

    @worker.tool("raise", description="", input_schema=free, effects="none")
    def raise_code(arguments: dict, request: ToolCallRequest) -> None:
        raise ToolError(arguments["code"], "custom")

    return worker


@pytest.fixture(scope="module")
def worker() -> Worker:
    return build_worker()


def call(
    worker: Worker, tool: str, arguments: dict | None = None, *, max_bytes: int = 65536
) -> tuple[ToolCallRequest, ToolCallResult]:
    request = ToolCallRequest(
        id="call-7",
        tool=ToolRef(name=tool),
        arguments=arguments or {},
        deadline_ms=1_700_000_000_000,
        limits=RequestLimits(max_result_bytes=max_bytes),
    )
    answer = worker.handle(codec.encode(request))
    assert isinstance(answer, ToolCallResult)
    # Whatever the SDK answers, the runner side must accept it as a well-formed result.
    assert codec.decode_result(codec.encode(answer), request) == answer
    return request, answer


def handle_json(worker: Worker, doc: dict) -> ToolCallResult | DescribeResult:
    return worker.handle(wire.dumps(doc))


def error_of(answer: ToolCallResult) -> tuple[str, str, bool]:
    assert answer.status == "error"
    assert answer.error is not None
    return answer.error.code, answer.error.message, answer.error.retryable


# --- in process ------------------------------------------------------------------------


def test_describe(worker: Worker) -> None:
    answer = worker.handle(codec.encode(DescribeRequest()))
    assert isinstance(answer, DescribeResult)
    assert (answer.worker.name, answer.worker.version) == ("test-worker", "2.1.0")
    assert answer.supported_versions == ["1.0", "1.1"]
    assert answer.version == "1.0" and answer.capabilities is None  # a 1.0 describe
    names = [tool.name for tool in answer.tools]
    assert names == ["greet", "add", "media", "deny", "crash", "big", "value", "raise"]
    assert answer.tools[0].input_schema == GREET_SCHEMA
    assert answer.tools[0].description == "Say hello"
    assert [t.effects for t in answer.tools[2:4]] == ["contained", "external"]
    data = codec.encode(answer)
    assert codec.decode_describe_result(data, max_bytes=len(data)) == answer


def test_str_becomes_text_output(worker: Worker) -> None:
    _, answer = call(worker, "greet", {"name": "Ada"})
    assert answer == ToolCallResult.ok("call-7", TextOutput(content="hello Ada"))


def test_dict_becomes_json_output(worker: Worker) -> None:
    _, answer = call(worker, "add", {"a": 2, "b": 40})
    assert answer.status == "ok"
    assert answer.output == JsonOutput(content={"sum": 42, "id": "call-7"})
    assert answer.id == "call-7"


def test_output_models_pass_through(worker: Worker) -> None:
    _, answer = call(worker, "media")
    assert answer.output == MediaOutput(mime_type="image/png", base64_data="QUJD", filename="a.png")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "arguments: 'name' is a required property"),
        ({"name": 5}, "arguments['name']: the value is not of type 'string'"),
        ({"name": "n" * 21}, "arguments['name']: "),
        ({"name": "a", "tags": ["x", 3]}, "arguments['tags'][1]: the value is not of type"),
        ({"name": "a", "extra": 1}, "Additional properties are not allowed ('extra'"),
    ],
)
def test_invalid_arguments_name_the_path(worker: Worker, arguments: dict, message: str) -> None:
    request = ToolCallRequest(
        id="call-7",
        tool=ToolRef(name="greet"),
        arguments=arguments,
        deadline_ms=1,
        limits=RequestLimits(max_result_bytes=4096),
    )
    answer = worker.handle(codec.encode(request))
    assert isinstance(answer, ToolCallResult)
    code, text, retryable = error_of(answer)
    assert code == "INVALID_ARGUMENTS"
    assert message in text
    assert retryable is False


def test_unknown_tool_lists_the_tools(worker: Worker) -> None:
    _, answer = call(worker, "nope")
    code, message, _ = error_of(answer)
    assert code == "UNKNOWN_TOOL"
    assert message == (
        "no tool 'nope'; this worker has: add, big, crash, deny, greet, media, raise, value"
    )


def test_tool_error_passes_through(worker: Worker) -> None:
    _, answer = call(worker, "deny")
    assert error_of(answer) == ("UNAVAILABLE", "backend down", True)


def test_an_exception_becomes_internal_with_a_traceback_on_stderr(
    worker: Worker, capsys: pytest.CaptureFixture[str]
) -> None:
    _, answer = call(worker, "crash")
    assert error_of(answer) == ("INTERNAL", "RuntimeError: kaput", False)
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert "RuntimeError: kaput" in err


def test_a_result_over_max_result_bytes_is_limit_exceeded(worker: Worker) -> None:
    _, fits = call(worker, "big", {"n": 10}, max_bytes=200)
    assert fits.status == "ok"
    _, answer = call(worker, "big", {"n": 500}, max_bytes=200)
    code, message, retryable = error_of(answer)
    assert code == "LIMIT_EXCEEDED"
    assert "over max_result_bytes=200" in message
    assert retryable is False
    assert len(codec.encode(answer)) <= 200


@pytest.mark.parametrize("version", ["2.0", "0.9", "1.2"])
def test_unsupported_version(worker: Worker, version: str) -> None:
    request = ToolCallRequest(
        version=version,
        id="call-9",
        tool=ToolRef(name="greet"),
        arguments={"name": "x"},
        deadline_ms=1,
        limits=RequestLimits(max_result_bytes=4096),
    )
    answer = worker.handle(codec.encode(request))
    assert isinstance(answer, ToolCallResult)
    code, message, _ = error_of(answer)
    assert code == "UNSUPPORTED_VERSION"
    assert "supported versions: 1.0, 1.1" in message
    assert answer.id == "call-9"


def test_a_worker_speaking_two_versions_answers_in_the_request_version() -> None:
    worker = Worker("w", "1", supported_versions=("1.0", "1.1"))

    @worker.tool("t", description="", input_schema={"type": "object"}, effects="none")
    def t(arguments: dict, request: ToolCallRequest) -> str:
        return request.version

    doc = {
        "kind": "ToolCallRequest",
        "version": "1.1",
        "id": "c",
        "tool": {"name": "t"},
        "arguments": {},
        "deadline_ms": 1,
        "limits": {"max_result_bytes": 1000},
        "added_in_1_1": True,
    }
    answer = handle_json(worker, doc)
    assert answer == ToolCallResult.ok("c", TextOutput(content="1.1"), version="1.1")
    described = worker.handle(b'{"kind":"DescribeRequest","version":"1.1"}')
    assert isinstance(described, DescribeResult)
    assert described.supported_versions == ["1.0", "1.1"]


@pytest.mark.parametrize(
    "data", [b"", b"garbage", b"\xff\xfe", b"[]", b'{"kind":"ToolCallRequest","version":"1.0"}']
)
def test_garbage_is_invalid_request_with_unknown_id(worker: Worker, data: bytes) -> None:
    answer = worker.handle(data)
    assert isinstance(answer, ToolCallResult)
    code, _, _ = error_of(answer)
    assert code == "INVALID_REQUEST"
    assert answer.id == "-"  # the reserved id, which no request can carry


def test_an_invalid_request_with_a_usable_id_echoes_it(worker: Worker) -> None:
    answer = handle_json(worker, {"kind": "ToolCallRequest", "version": "1.0", "id": "c-3"})
    assert isinstance(answer, ToolCallResult)
    assert error_of(answer)[0] == "INVALID_REQUEST"
    assert answer.id == "c-3"
    assert "tool: Field required" in error_of(answer)[1]


def _deep(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


#: Values a tool may return that cannot go on the wire, and what the INTERNAL error says.
UNSENDABLE = {
    "nan": lambda: {"x": float("nan")},  # would have been dumped as null
    "infinity": lambda: [float("inf")],
    "surrogate": lambda: "\ud800",  # cannot be encoded as UTF-8
    "set": lambda: {1, 2},  # not a JSON value
    "deep": lambda: _deep(5000),  # serializing it overflows
}


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("nan", "non-finite"),
        ("infinity", "non-finite"),
        ("surrogate", "TextOutput"),
        ("set", "set is not a JSON value"),
        ("deep", "depth"),
    ],
)
def test_unsendable_tool_values_become_internal(worker: Worker, case: str, message: str) -> None:
    _, answer = call(worker, "value", {"case": case})
    code, text, _ = error_of(answer)
    assert code == "INTERNAL"
    assert message in text


@pytest.mark.parametrize("bad_code", ["NOPE", "internal", "WORKER_OOM", "MALFORMED_OUTPUT"])
def test_a_tool_error_with_a_non_worker_code_becomes_internal(worker: Worker, bad_code) -> None:
    # Runner-only codes would get the whole result refused as MALFORMED_OUTPUT.
    _, answer = call(worker, "raise", {"code": bad_code})
    code, message, retryable = error_of(answer)
    assert (code, retryable) == ("INTERNAL", False)
    assert "not a worker code: custom" in message


def test_registering_an_invalid_input_schema_fails_early() -> None:
    worker = Worker("w", "1")
    with pytest.raises(jsonschema.SchemaError):
        worker.tool("t", description="", input_schema={"type": "nonsense"}, effects="none")


# --- end to end through run() ----------------------------------------------------------

NOISY_WORKER = textwrap.dedent(
    """
    import os, subprocess, sys
    from envelopes.worker import Worker, ToolError

    if os.environ.get("BANNER"):  # printed before run(): only harmless while buffered
        print("banner printed at import, still buffered when run() starts")
    worker = Worker("noisy", "1.0")

    @worker.tool("noisy", description="", input_schema={"type": "object"}, effects="none")
    def noisy(arguments, request):
        print("print from the tool")
        sys.stdout.write("sys.stdout.write from the tool\\n")
        os.write(1, b"os.write to fd 1\\n")
        subprocess.run(["echo", "echo from a child process"], check=True)
        if arguments.get("fail"):
            raise ToolError("TOOL_FAILED", "asked to fail")
        return {"answer": 42}

    worker.serve()
    """
)
NOISE = [
    "banner printed at import",
    "print from the tool",
    "sys.stdout.write from the tool",
    "os.write to fd 1",
    "echo from a child process",
]


def run_worker(data: bytes, *, unbuffered: bool) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(REPO)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    else:
        env["BANNER"] = "1"
    return subprocess.run(
        [sys.executable, "-c", NOISY_WORKER],
        input=data,
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
        cwd=REPO,
    )


def noisy_request(arguments: dict) -> ToolCallRequest:
    return ToolCallRequest(
        id="call-e2e",
        tool=ToolRef(name="noisy"),
        arguments=arguments,
        deadline_ms=1,
        limits=RequestLimits(max_result_bytes=4096),
    )


def test_run_ok_keeps_stdout_to_exactly_one_document() -> None:
    request = noisy_request({})
    proc = run_worker(codec.encode(request), unbuffered=False)
    stderr = proc.stderr.decode()
    # decode_result is strict: one JSON object and nothing else, or it raises.
    result = codec.decode_result(proc.stdout, request)
    assert result == ToolCallResult.ok("call-e2e", JsonOutput(content={"answer": 42}))
    assert proc.returncode == 0, stderr
    for noise in NOISE:
        assert noise in stderr
        assert noise.encode() not in proc.stdout


def test_run_error_exits_1_and_still_writes_one_document() -> None:
    # Unbuffered this time: the tool's prints are written at once, straight to fd 1.
    request = noisy_request({"fail": True})
    proc = run_worker(codec.encode(request), unbuffered=True)
    result = codec.decode_result(proc.stdout, request)
    assert error_of(result) == ("TOOL_FAILED", "asked to fail", False)
    assert proc.returncode == 1
    for noise in NOISE[1:]:  # no banner: unbuffered, it would reach stdout before run()
        assert noise in proc.stderr.decode()


def test_run_answers_describe_and_garbage() -> None:
    proc = run_worker(b'{"kind":"DescribeRequest","version":"1.0"}\n', unbuffered=False)
    assert proc.returncode == 0
    described = codec.decode_describe_result(proc.stdout, max_bytes=4096)
    assert [t.name for t in described.tools] == ["noisy"]
    proc = run_worker(b"not json", unbuffered=False)
    assert proc.returncode == 1
    doc = wire.loads(proc.stdout, max_bytes=4096)
    assert (doc["id"], doc["status"], doc["error"]["code"]) == (
        "-",
        "error",
        "INVALID_REQUEST",
    )
