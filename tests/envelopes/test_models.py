"""envelopes.v1 models and envelopes.codec: exact round trips, strictness, bounds, codes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from envelopes import codec, wire
from envelopes.codec import MalformedOutput, RequestError
from envelopes.v1 import (
    MAX_KEY,
    MAX_MESSAGE,
    MAX_PARTS,
    MAX_REQUEST_BYTES,
    MAX_RESULT_BYTES_CEILING,
    MAX_TOOLS,
    RUNNER_ERROR_CODES,
    WORKER_ERROR_CODES,
    CallContext,
    DescribeRequest,
    DescribeResult,
    ErrorInfo,
    JsonOutput,
    MediaOutput,
    MixedOutput,
    RequestLimits,
    TextOutput,
    ToolCallRequest,
    ToolCallResult,
    ToolDescription,
    ToolRef,
    WorkerInfo,
)

PNG = "iVBORw0KGgo="


def result_doc(**changes: object) -> dict:
    doc: dict = {
        "kind": "ToolCallResult",
        "version": "1.0",
        "id": "call-1",
        "status": "ok",
        "output": {"type": "text", "content": "hi"},
    }
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not ...}


def describe_result() -> DescribeResult:
    return DescribeResult(
        worker=WorkerInfo(name="greeter", version="1.2.3+build.4"),
        supported_versions=["1.0"],
        tools=[
            ToolDescription(
                name="greet",
                description="Say hello",
                input_schema={"type": "object", "properties": {"name": {"type": "string"}}},
                effects="none",
            ),
            ToolDescription(
                name="rm", description="", input_schema={"type": "object"}, effects="external"
            ),
        ],
    )


def invalid(model: type, doc: dict) -> str:
    with pytest.raises(ValidationError) as info:
        model.model_validate(doc)
    return str(info.value)


# --- exact round trips ---------------------------------------------------------------


def test_request_round_trips_exactly(request_model: ToolCallRequest) -> None:
    full = request_model.model_copy(
        update={
            "context": CallContext(
                session_id="s-1", call_id="c-1", attempt=2, idempotency_key="k" * 256
            ),
            "extensions": {"acme.io/trace": {"span": "ab12", "sampled": True}, "x/y": None},
        }
    )
    for model in (request_model, full):
        data = codec.encode(model)
        back = codec.decode_request(data)
        assert back == model
        assert codec.encode(back) == data


def test_describe_request_round_trips_exactly() -> None:
    data = codec.encode(DescribeRequest())
    assert data == b'{"kind":"DescribeRequest","version":"1.0"}'
    assert codec.decode_request(data) == DescribeRequest()


OUTPUTS = {
    "text": TextOutput(content="héllo\nworld \U0001f600"),
    "text-empty": TextOutput(content=""),
    "json-object": JsonOutput(content={"a": [1, 2.5, None, True, {"b": "c"}], "n": -(2**53 - 1)}),
    "json-null": JsonOutput(content=None),
    "json-scalar": JsonOutput(content=0.1),
    "media": MediaOutput(mime_type="image/png", base64_data=PNG, filename="plot 1.png"),
    "media-no-name": MediaOutput(mime_type="application/vnd.acme+json", base64_data=""),
    "mixed": MixedOutput(
        parts=[
            TextOutput(content="see"),
            MediaOutput(mime_type="image/png", base64_data=PNG),
            MixedOutput(parts=[JsonOutput(content=[1]), MixedOutput(parts=[])]),
        ]
    ),
}


@pytest.mark.parametrize("name", OUTPUTS)
def test_ok_result_round_trips_exactly(name: str, request_model: ToolCallRequest) -> None:
    result = ToolCallResult.ok("call-1", OUTPUTS[name])
    data = codec.encode(result)
    back = codec.decode_result(data, request_model)
    assert back == result
    assert codec.encode(back) == data
    assert b'"error"' not in data


def test_error_result_round_trips_exactly(request_model: ToolCallRequest) -> None:
    result = ToolCallResult.fail("call-1", "TOOL_FAILED", "exit status 2", retryable=True)
    data = codec.encode(result)
    assert codec.decode_result(data, request_model) == result
    assert codec.encode(codec.decode_result(data, request_model)) == data
    assert wire.loads(data, max_bytes=1024) == {
        "kind": "ToolCallResult",
        "version": "1.0",
        "id": "call-1",
        "status": "error",
        "error": {"code": "TOOL_FAILED", "message": "exit status 2", "retryable": True},
    }


def test_describe_result_round_trips_exactly() -> None:
    result = describe_result()
    data = codec.encode(result)
    back = codec.decode_describe_result(data, max_bytes=len(data))
    assert back == result
    assert codec.encode(back) == data


# --- what goes on the wire -------------------------------------------------------------


def test_unset_optional_fields_are_omitted(request_model: ToolCallRequest) -> None:
    doc = wire.loads(codec.encode(request_model), max_bytes=4096)
    assert set(doc) == {"kind", "version", "id", "tool", "arguments", "deadline_ms", "limits"}
    partial = request_model.model_copy(update={"context": CallContext(attempt=3)})
    assert wire.loads(codec.encode(partial), max_bytes=4096)["context"] == {"attempt": 3}
    media = wire.loads(codec.encode(OUTPUTS["media-no-name"]), max_bytes=4096)
    assert "filename" not in media


def test_json_output_keeps_null_content() -> None:
    assert codec.encode(JsonOutput(content=None)) == b'{"type":"json","content":null}'
    result = codec.encode(ToolCallResult.ok("a", JsonOutput(content={"k": None})))
    assert b'"output":{"type":"json","content":{"k":null}}' in result


def test_json_output_refuses_non_finite_numbers() -> None:
    # Dumped by pydantic they would silently become null; the model refuses them instead.
    for value in (float("nan"), float("inf"), [{"x": -float("inf")}]):
        with pytest.raises(ValidationError, match="non-finite"):
            JsonOutput(content=value)


# --- must-ignore inbound, closed outbound ----------------------------------------------


def test_request_ignores_unknown_fields_at_every_level(request_doc: dict) -> None:
    request_doc["added_in_1_1"] = {"anything": [1, 2]}
    request_doc["tool"]["revision"] = 7
    request_doc["limits"]["max_stderr_bytes"] = 10
    request_doc["context"] = {"session_id": "s", "trace_parent": "00-ab"}
    request = codec.decode_request(wire.dumps(request_doc))
    assert isinstance(request, ToolCallRequest)
    assert request.tool == ToolRef(name="echo")
    assert request.context == CallContext(session_id="s")
    assert b"added_in_1_1" not in codec.encode(request)
    describe = codec.decode_request(b'{"kind":"DescribeRequest","version":"1.0","new":1}')
    assert describe == DescribeRequest()


@pytest.mark.parametrize(
    "doc",
    [
        result_doc(extra=1),
        result_doc(output={"type": "text", "content": "x", "encoding": "utf-8"}),
        result_doc(output={"type": "mixed", "parts": [{"type": "json", "content": 1, "x": 2}]}),
        result_doc(
            status="error",
            output=...,
            error={"code": "INTERNAL", "message": "m", "retryable": False, "details": {}},
        ),
    ],
)
def test_result_refuses_unknown_fields(doc: dict) -> None:
    assert "Extra inputs are not permitted" in invalid(ToolCallResult, doc)


def test_describe_result_refuses_unknown_fields() -> None:
    doc = describe_result().to_wire()
    doc["tools"][0]["dangerous"] = True
    assert "tools.0.dangerous" in invalid(DescribeResult, doc)
    doc = describe_result().to_wire()
    doc["worker"]["build"] = "x"
    assert "worker.build" in invalid(DescribeResult, doc)


# --- strictness ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        (result_doc(status="error", output=..., error={"code": "INTERNAL", "message": "m",
                                                      "retryable": "false"}), "retryable"),
        (result_doc(status="error", output=..., error={"code": "INTERNAL", "message": "m",
                                                      "retryable": 0}), "retryable"),
        (result_doc(status="error", output=..., error={"code": "INTERNAL", "message": 1,
                                                      "retryable": False}), "message"),
        (result_doc(output={"type": "text", "content": 1}), "content"),
        (result_doc(id=1), "id"),
        (result_doc(status=["ok"]), "status"),
        (result_doc(output={"type": "mixed", "parts": {"0": {"type": "text", "content": ""}}}),
         "parts"),
    ],
)  # fmt: skip
def test_result_is_strict_about_types(doc: dict, where: str) -> None:
    assert where in invalid(ToolCallResult, doc)


@pytest.mark.parametrize(
    ("field", "value"),
    [("deadline_ms", "1"), ("deadline_ms", 1.0), ("deadline_ms", True), ("arguments", [])],
)
def test_request_values_are_strict(request_doc: dict, field: str, value: object) -> None:
    request_doc[field] = value
    assert field in invalid(ToolCallRequest, request_doc)


def test_request_limits_are_strict_and_bounded(request_doc: dict) -> None:
    for bad in ("1", 0, MAX_RESULT_BYTES_CEILING + 1):
        request_doc["limits"] = {"max_result_bytes": bad}
        assert "limits.max_result_bytes" in invalid(ToolCallRequest, request_doc)
    request_doc["limits"] = {"max_result_bytes": MAX_RESULT_BYTES_CEILING}
    assert ToolCallRequest.model_validate(request_doc).limits == RequestLimits(
        max_result_bytes=MAX_RESULT_BYTES_CEILING
    )


# --- output xor error --------------------------------------------------------------------

ERROR = {"code": "TOOL_FAILED", "message": "boom", "retryable": False}
TEXT = {"type": "text", "content": "x"}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (result_doc(output=...), "status 'ok' needs a non-null 'output'"),
        (result_doc(output=None), "status 'ok' needs a non-null 'output'"),
        (result_doc(error=ERROR), "status 'ok' must not carry 'error'"),
        (result_doc(error=None), "status 'ok' must not carry 'error'"),
        (result_doc(status="error", output=...), "status 'error' needs a non-null 'error'"),
        (result_doc(status="error", error=ERROR), "status 'error' must not carry 'output'"),
        (result_doc(status="error", output=None, error=ERROR), "must not carry 'output'"),
    ],
)
def test_output_xor_error(doc: dict, message: str) -> None:
    assert message in invalid(ToolCallResult, doc)


def test_ok_and_error_each_with_their_own_field_are_valid() -> None:
    assert ToolCallResult.model_validate(result_doc()).output == TextOutput(content="hi")
    doc = result_doc(status="error", output=..., error=ERROR)
    assert ToolCallResult.model_validate(doc).error == ErrorInfo(**ERROR)


# --- identifiers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_id", ["", "-x", ".x", "a b", "a/b", "caf\u00e9", "\u0661", "a\n", "x" * 129, "a\x00"]
)
def test_result_id_must_match_the_pattern(bad_id: str) -> None:
    assert "id" in invalid(ToolCallResult, result_doc(id=bad_id))


@pytest.mark.parametrize("good_id", ["a", "0", "call-1", "s:1.t_2", "x" * 128])
def test_result_id_accepts_the_pattern(good_id: str) -> None:
    assert ToolCallResult.model_validate(result_doc(id=good_id)).id == good_id


@pytest.mark.parametrize("name", ["", "1tool", "_t", "a/b", "a b", "t" * 65, "t\n"])
def test_tool_name_must_match_the_pattern(request_doc: dict, name: str) -> None:
    request_doc["tool"] = {"name": name}
    assert "tool.name" in invalid(ToolCallRequest, request_doc)


@pytest.mark.parametrize("version", ["1", "1.0.0", "v1.0", "1.", ".1", "12345.0", "1.0\n", ""])
def test_version_must_be_major_dot_minor(version: str) -> None:
    assert "version" in invalid(ToolCallResult, result_doc(version=version))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("mime_type", "Image/PNG"),
        ("mime_type", "image"),
        ("mime_type", "image/png; charset=x"),
        ("base64_data", "abc$"),
        ("base64_data", "ab==="),
        ("base64_data", "YQ==\n"),
        ("filename", "../etc/passwd"),
        ("filename", ".hidden"),
        ("filename", "a/b.png"),
        ("filename", "x" * 256),
    ],
)
def test_media_fields_must_match_their_patterns(field: str, value: str) -> None:
    media = {"type": "media", "mime_type": "image/png", "base64_data": PNG, field: value}
    assert field in invalid(ToolCallResult, result_doc(output=media))


# --- bounds ------------------------------------------------------------------------------


def test_error_message_is_bounded() -> None:
    at_limit = {"code": "INTERNAL", "message": "m" * MAX_MESSAGE, "retryable": False}
    assert ToolCallResult.model_validate(result_doc(status="error", output=..., error=at_limit))
    over = dict(at_limit, message="m" * (MAX_MESSAGE + 1))
    reason = invalid(ToolCallResult, result_doc(status="error", output=..., error=over))
    assert "error.message" in reason
    assert f"at most {MAX_MESSAGE} characters" in reason


def test_fail_truncates_a_long_message_to_the_bound() -> None:
    result = ToolCallResult.fail("a", "INTERNAL", "x" * (MAX_MESSAGE + 10))
    assert result.error is not None
    assert len(result.error.message) == MAX_MESSAGE


def test_mixed_output_parts_are_bounded() -> None:
    parts = [TEXT] * MAX_PARTS
    ok = ToolCallResult.model_validate(result_doc(output={"type": "mixed", "parts": parts}))
    assert isinstance(ok.output, MixedOutput)
    reason = invalid(ToolCallResult, result_doc(output={"type": "mixed", "parts": [*parts, TEXT]}))
    assert f"at most {MAX_PARTS} items" in reason


def test_describe_result_lists_are_bounded() -> None:
    doc = describe_result().to_wire()
    tool = doc["tools"][0]
    doc["tools"] = [dict(tool, name=f"t{i}") for i in range(MAX_TOOLS + 1)]
    assert f"at most {MAX_TOOLS} items" in invalid(DescribeResult, doc)
    doc = describe_result().to_wire()
    doc["supported_versions"] = []
    assert "supported_versions" in invalid(DescribeResult, doc)
    doc = describe_result().to_wire()
    doc["tools"][0]["description"] = "d" * 4097
    assert "tools.0.description" in invalid(DescribeResult, doc)


def test_json_content_keys_are_bounded() -> None:
    ok = result_doc(output={"type": "json", "content": {"k" * MAX_KEY: 1}})
    assert ToolCallResult.model_validate(ok)
    long_key = result_doc(output={"type": "json", "content": [{"k" * (MAX_KEY + 1): 1}]})
    assert f"key longer than {MAX_KEY}" in invalid(ToolCallResult, long_key)


# --- extensions ----------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["acme/trace", "acme.io/x", "a-b.c-d/K_1.v-2", "x/" + "k" * 64])
def test_namespaced_extension_keys_are_accepted(request_doc: dict, key: str) -> None:
    request_doc["extensions"] = {key: {"v": 1}}
    assert ToolCallRequest.model_validate(request_doc).extensions == {key: {"v": 1}}


@pytest.mark.parametrize(
    "key", ["trace", "Acme/x", "/x", "acme/", "acme..io/x", "acme/x/y", "x/" + "k" * 65, "a/b\n"]
)
def test_extension_keys_must_be_namespaced(request_doc: dict, key: str) -> None:
    request_doc["extensions"] = {key: 1}
    assert "extensions" in invalid(ToolCallRequest, request_doc)


def test_extensions_are_bounded(request_doc: dict) -> None:
    request_doc["extensions"] = {f"acme/k{i}": i for i in range(65)}
    assert "extensions" in invalid(ToolCallRequest, request_doc)


# --- codec.decode_request ------------------------------------------------------------------


def request_error(data: bytes, **kwargs: object) -> RequestError:
    with pytest.raises(RequestError) as info:
        codec.decode_request(data, **kwargs)  # type: ignore[arg-type]
    assert str(info.value) == info.value.message
    return info.value


@pytest.mark.parametrize("version", ["2.0", "0.9", "1.999", "1.2", "1.10"])
@pytest.mark.parametrize("kind", ["ToolCallRequest", "DescribeRequest"])
def test_unsupported_versions_are_named_as_such(request_doc: dict, version: str, kind: str) -> None:
    request_doc.update(kind=kind, version=version)
    error = request_error(wire.dumps(request_doc))
    assert error.code == "UNSUPPORTED_VERSION"
    assert repr(version) in error.message
    assert "supported versions: 1.0, 1.1" in error.message
    assert error.request_id == "call-1"


def test_a_worker_may_declare_fewer_or_more_versions(request_doc: dict) -> None:
    request_doc["version"] = "1.1"
    assert codec.decode_request(wire.dumps(request_doc)).version == "1.1"
    error = request_error(wire.dumps(request_doc), supported_versions=("1.0",))
    assert error.code == "UNSUPPORTED_VERSION"
    assert error.message.endswith("supported versions: 1.0")
    request_doc["version"] = "1.2"
    assert codec.decode_request(wire.dumps(request_doc), ("1.0", "1.2")).version == "1.2"
    request_doc["version"] = "2.0"
    error = request_error(wire.dumps(request_doc), supported_versions=("1.0", "1.1", "1.2"))
    assert "supported versions: 1.0, 1.1, 1.2" in error.message


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("version"), "version: missing or not a string"),
        (lambda d: d.update(version=1.0), "version: missing or not a string"),
        (lambda d: d.pop("kind"), "kind: expected one of"),
        (lambda d: d.update(kind="ToolCallResult"), "got 'ToolCallResult'"),
        (lambda d: d.update(kind=[]), "kind: expected one of"),  # unhashable: no TypeError
        (lambda d: d.update(kind={}), "kind: expected one of"),
        (lambda d: d.pop("arguments"), "arguments: Field required"),
        (lambda d: d.update(tool={}), "tool.name: Field required"),
        (lambda d: d.pop("limits"), "limits: Field required"),
        (lambda d: d.update(limits={}), "limits.max_result_bytes: Field required"),
        (lambda d: d.update(deadline_ms=-1), "deadline_ms: Input should be greater than"),
    ],
)
def test_invalid_requests_name_the_field(request_doc: dict, mutate, message: str) -> None:
    mutate(request_doc)
    error = request_error(wire.dumps(request_doc))
    assert error.code == "INVALID_REQUEST"
    assert message in error.message
    assert error.request_id == "call-1"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json", "request is not acceptable JSON: invalid JSON at line 1"),
        (b"", "request is not acceptable JSON: empty input"),
        (b'{"id":"a","id":"b"}', "duplicate key 'id'"),
        (b"[]", "expected a JSON object"),
    ],
)
def test_bad_json_is_an_invalid_request_without_an_id(data: bytes, message: str) -> None:
    error = request_error(data)
    assert error.code == "INVALID_REQUEST"
    assert message in error.message
    assert error.request_id is None


def test_an_oversized_request_is_refused(request_doc: dict) -> None:
    request_doc["arguments"] = {"blob": "x" * MAX_REQUEST_BYTES}
    error = request_error(wire.dumps(request_doc))
    assert error.code == "INVALID_REQUEST"
    assert f"over the cap of {MAX_REQUEST_BYTES}" in error.message


@pytest.mark.parametrize("bad_id", [17, "has space", "", None, "x" * 200])
def test_an_unusable_id_is_not_echoed(request_doc: dict, bad_id: object) -> None:
    request_doc["id"] = bad_id
    error = request_error(wire.dumps(request_doc))
    assert error.code == "INVALID_REQUEST"
    assert "id" in error.message
    assert error.request_id is None


# --- codec.decode_result ---------------------------------------------------------------


def malformed(data: bytes, request: ToolCallRequest) -> str:
    with pytest.raises(MalformedOutput) as info:
        codec.decode_result(data, request)
    return str(info.value)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (result_doc(id="call-2"), "id: expected the request's 'call-1', got 'call-2'"),
        (result_doc(version="1.1"), "version: expected the request's '1.0', got '1.1'"),
        (result_doc(version=...), "version: expected the request's '1.0', got None"),
        (result_doc(kind=...), "kind: expected 'ToolCallResult', got None"),
        (result_doc(kind="DescribeResult"), "kind: expected 'ToolCallResult'"),
        (result_doc(extra=True), "invalid ToolCallResult: extra: Extra inputs are not permitted"),
        (result_doc(output=...), "invalid ToolCallResult"),
    ],
)
def test_decode_result_refuses(doc: dict, message: str, request_model: ToolCallRequest) -> None:
    assert message in malformed(wire.dumps(doc), request_model)


@pytest.mark.parametrize("code", RUNNER_ERROR_CODES)
def test_runner_only_codes_are_refused_from_a_worker(code: str, request_model) -> None:
    data = codec.encode(ToolCallResult.fail("call-1", code, "I am the runner now"))
    assert malformed(data, request_model) == (
        f"error.code: {code} may only be produced by the runner"
    )


@pytest.mark.parametrize("code", WORKER_ERROR_CODES)
def test_worker_codes_are_accepted(code: str, request_model: ToolCallRequest) -> None:
    result = ToolCallResult.fail("call-1", code, "m", retryable=True)
    assert codec.decode_result(codec.encode(result), request_model) == result


def test_decode_result_caps_bytes_before_parsing(request_model: ToolCallRequest) -> None:
    fits = codec.encode(ToolCallResult.ok("call-1", TextOutput(content="x" * 20)))
    cap = len(fits)
    small = request_model.model_copy(update={"limits": RequestLimits(max_result_bytes=cap)})
    assert codec.decode_result(fits, small).status == "ok"
    big = codec.encode(ToolCallResult.ok("call-1", TextOutput(content="x" * 21)))
    assert malformed(big, small) == f"document is {cap + 1} bytes, over the cap of {cap}"
    # Not even parsed: garbage of the same size fails on the size, not on the syntax.
    assert f"over the cap of {cap}" in malformed(b"\xff" * (cap + 1), small)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty input"),
        (b'{"kind":"ToolCallResult"}\n{"kind":"ToolCallResult"}', "trailing data"),
        (b'{"kind":"ToolCallResult","kind":"ToolCallResult"}', "duplicate key"),
        (b'{"kind":"ToolCallResult","x":NaN}', "NaN"),
    ],
)
def test_decode_result_refuses_bad_wire(data: bytes, message: str, request_model) -> None:
    assert message in malformed(data, request_model)


def test_decode_describe_result_refuses() -> None:
    doc = describe_result().to_wire()
    data = wire.dumps(doc)
    with pytest.raises(MalformedOutput, match="over the cap of 10"):
        codec.decode_describe_result(data, max_bytes=10)
    with pytest.raises(MalformedOutput, match="version: missing or not a string"):
        codec.decode_describe_result(wire.dumps({**doc, "version": None}), max_bytes=4096)
    with pytest.raises(MalformedOutput, match="kind: expected 'DescribeResult'"):
        codec.decode_describe_result(codec.encode(DescribeRequest()), max_bytes=4096)
    with pytest.raises(MalformedOutput, match="invalid DescribeResult: tools: Field required"):
        doc.pop("tools")
        codec.decode_describe_result(wire.dumps(doc), max_bytes=4096)
