"""A small SDK for Python workers: declare tools, call `serve()`, and the envelope is handled.

    from envelopes.worker import Worker, ToolError

    worker = Worker("greeter", "1.0.0")

    @worker.tool("greet", description="Say hello", effects="none",
                 input_schema={"type": "object", "properties": {"name": {"type": "string",
                 "maxLength": 100}}, "required": ["name"], "additionalProperties": False})
    def greet(arguments, request):
        return f"hello {arguments['name']}"

    if __name__ == "__main__":
        worker.serve()

What it does for you: reads one request from stdin (bounded), answers DescribeRequest,
refuses bad requests and unsupported versions with the right code, validates arguments
against the tool's schema (INVALID_ARGUMENTS with the path and the rule, never the value),
keeps stdout pure by pointing fd 1 at stderr while your tool runs (so even a child
process's prints become logs), refuses a result larger than `limits.max_result_bytes`
(LIMIT_EXCEEDED), and exits 0 for `ok` and 1 for `error`.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema

from envelopes import codec
from envelopes.v1 import (
    MAX_MESSAGE,
    MAX_REQUEST_BYTES,
    SUPPORTED_VERSIONS,
    DescribeRequest,
    DescribeResult,
    Effects,
    JsonOutput,
    MediaOutput,
    MixedOutput,
    TextOutput,
    ToolCallRequest,
    ToolCallResult,
    ToolDescription,
    WorkerErrorCode,
    WorkerInfo,
    is_worker_error_code,
)

Output = TextOutput | JsonOutput | MediaOutput | MixedOutput
Handler = Callable[[dict[str, Any], ToolCallRequest], Any]

#: Echoed when a request is too broken to carry a usable id.
UNKNOWN_ID = "unknown"


class ToolError(Exception):
    """Raise from a tool to answer with an error envelope instead of a crash."""

    def __init__(self, code: str, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


@dataclass(frozen=True)
class _Tool:
    description: ToolDescription
    validator: jsonschema.protocols.Validator
    handler: Handler


class Worker:
    def __init__(
        self, name: str, version: str, supported_versions: tuple[str, ...] = SUPPORTED_VERSIONS
    ) -> None:
        self.info = WorkerInfo(name=name, version=version)
        self.supported_versions = supported_versions
        self._tools: dict[str, _Tool] = {}

    def tool(
        self, name: str, *, description: str, input_schema: dict[str, Any], effects: Effects
    ) -> Callable[[Handler], Handler]:
        """Register `handler(arguments, request)`; it returns a str (text output), an
        output model, or any other JSON value (json output), or raises ToolError."""
        jsonschema.Draft202012Validator.check_schema(input_schema)
        described = ToolDescription(
            name=name, description=description, input_schema=input_schema, effects=effects
        )

        def register(handler: Handler) -> Handler:
            validator = jsonschema.Draft202012Validator(input_schema)
            self._tools[name] = _Tool(described, validator, handler)
            return handler

        return register

    def describe(self) -> DescribeResult:
        return DescribeResult(
            worker=self.info,
            supported_versions=list(self.supported_versions),
            tools=[tool.description for tool in self._tools.values()],
        )

    def handle(self, data: bytes) -> ToolCallResult | DescribeResult:
        """Answer one request given as raw bytes; never raises."""
        try:
            request = codec.decode_request(data, self.supported_versions)
        except codec.RequestError as exc:
            return ToolCallResult.fail(exc.request_id or UNKNOWN_ID, exc.code, exc.message)
        if isinstance(request, DescribeRequest):
            return self.describe()
        return self._call(request)

    def _call(self, request: ToolCallRequest) -> ToolCallResult:
        def fail(code: str, message: str, retryable: bool = False) -> ToolCallResult:
            sent: WorkerErrorCode = "INTERNAL"
            if is_worker_error_code(code):  # else ErrorInfo raises or the runner refuses
                sent = code
            else:
                message = f"tool raised ToolError({code[:64]!r}), not a worker code: {message}"
                retryable = False
            message = message.encode("utf-8", "replace").decode("utf-8")  # lone surrogates
            return ToolCallResult.fail(request.id, sent, message, retryable, request.version)

        tool = self._tools.get(request.tool.name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return fail("UNKNOWN_TOOL", f"no tool {request.tool.name!r}; this worker has: {known}")
        problem = jsonschema.exceptions.best_match(tool.validator.iter_errors(request.arguments))
        if problem is not None:
            return fail("INVALID_ARGUMENTS", _argument_problem(problem)[:MAX_MESSAGE])
        try:
            value = tool.handler(dict(request.arguments), request)
            result = ToolCallResult.ok(request.id, _as_output(value), request.version)
            size = len(codec.encode(result))  # may fail too (e.g. RecursionError)
        except ToolError as exc:
            return fail(exc.code, exc.message, exc.retryable)
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            return fail("INTERNAL", f"{type(exc).__name__}: {exc}")
        if size > request.limits.max_result_bytes:
            return fail(
                "LIMIT_EXCEEDED",
                f"result is {size} bytes, over max_result_bytes={request.limits.max_result_bytes}",
            )
        return result

    def serve(self) -> None:
        """Serve one request from stdin to stdout and exit with the envelope's exit code."""
        data = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
        # Anything the tool (or a child process) prints goes to stderr, never into the
        # envelope: fd 1 points at stderr until the answer is written on the saved fd.
        # The flush comes after the switch, so prints still buffered from before run()
        # (a banner at import time) become logs too instead of corrupting the envelope.
        envelope_fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout.flush()
        answer = self.handle(data)
        failed = isinstance(answer, ToolCallResult) and answer.status == "error"
        payload = codec.encode(answer)
        sys.stdout.flush()
        sys.stderr.flush()
        with os.fdopen(envelope_fd, "wb") as out:
            out.write(payload)
        os._exit(1 if failed else 0)


def _as_output(value: Any) -> Output:
    if isinstance(value, TextOutput | JsonOutput | MediaOutput | MixedOutput):
        return value
    if isinstance(value, str):
        return TextOutput(content=value)
    return JsonOutput(content=value)


def _argument_problem(problem: jsonschema.ValidationError) -> str:
    """Where the arguments break the schema and which rule, never the value itself:
    a refused value may be a secret the model pasted, and messages reach logs."""
    where = "arguments" + "".join(f"[{p!r}]" for p in problem.absolute_path)
    if problem.validator in ("required", "additionalProperties", "dependentRequired"):
        return f"{where}: {problem.message}"  # names properties, not values
    if problem.validator == "type":
        return f"{where}: the value is not of type {problem.validator_value!r}"
    rule = json.dumps(problem.validator_value, ensure_ascii=False)[:200]
    return f"{where}: the value fails {problem.validator} {rule}"
