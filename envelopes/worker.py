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

Envelope 1.1 (a DescribeRequest of version 1.1 gets `capabilities: ["files", "events"]`;
a 1.0 one gets the 1.0 answer): every tool call runs in its own workspace, a fresh
directory under $TMPDIR (or /tmp) that is the handler's working directory and
`request.workspace`, removed afterwards. A 1.1 request's `files` are written there before
the handler runs (envelopes.files: never through a symlink, never outside); its
`collect` patterns are gathered afterwards and appended to the output as media parts
with a `path` (the output becomes `mixed`); with `events`, `request.emit.log(text)`,
`.progress(fraction, message=None)` and `.partial(text)` write RS-framed events on
stderr within the request's budget (envelopes.events); without, they do nothing.

Fast start: a worker is one process per call, so its start is paid on every call. The
usual path (a well-formed request, arguments that fit the schema, a str or plain JSON
result) imports nothing but the standard library's core: the request is checked by
envelopes.worker_request, the arguments by a check compiled from the schema
(envelopes.worker_schema) and the answer is written by envelopes.wire. Whenever one of
those checks cannot vouch for a value, the pydantic models and jsonschema (imported
then) decide, so answers and error messages are exactly the models' (a test runs both
paths side by side). The `request` a handler gets is a RequestView: the fields of a
ToolCallRequest as attributes; anything else (`model_dump()`, ...) is delegated to the
real model, built on first use.
"""

from __future__ import annotations

import os
import sys

from envelopes import events, files, rules, wire
from envelopes.rules import is_version, json_bounded
from envelopes.worker_request import RequestView, at_least_1_1, check_call
from envelopes.worker_schema import compile_schema

TYPE_CHECKING = False  # typing costs a fresh process milliseconds; mypy reads it as typing's
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeAlias

    import jsonschema

    from envelopes.v1 import (
        DescribeResult,
        Effects,
        JsonOutput,
        MediaOutput,
        MixedOutput,
        TextOutput,
        ToolCallRequest,
        ToolCallResult,
        WorkerInfo,
    )

    Output: TypeAlias = TextOutput | JsonOutput | MediaOutput | MixedOutput
    Handler: TypeAlias = Callable[[dict[str, Any], RequestView], Any]

#: Echoed when a request is too broken to carry a usable id.
UNKNOWN_ID = rules.RESERVED_ID
#: Nesting of a JSON result the fast path writes itself; deeper ones go through the models
#: (the runner refuses envelopes nested deeper than wire.MAX_DEPTH anyway).
_FAST_DEPTH = wire.MAX_DEPTH - 4
_WORKER_CODES = frozenset(rules.WORKER_ERROR_CODE_NAMES)
#: What the SDK does for every tool (1.1): input files and `collect`, events on stderr.
CAPABILITIES: tuple[str, ...] = (rules.CAPABILITY_FILES, rules.CAPABILITY_EVENTS)


class ToolError(Exception):
    """Raise from a tool to answer with an error envelope instead of a crash."""

    def __init__(self, code: str, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


class _Slow(Exception):
    """The fast path cannot vouch for a value: let the models decide."""


class _Tool:
    __slots__ = ("_validator", "check", "description", "handler", "schema")

    def __init__(
        self, description: dict[str, Any], check: Callable[[Any], bool] | None, handler: Handler
    ) -> None:
        self.description = description
        self.schema = description["input_schema"]
        self.check = check
        self.handler = handler
        self._validator: jsonschema.protocols.Validator | None = None

    def validator(self) -> jsonschema.protocols.Validator:
        if self._validator is None:
            import jsonschema

            self._validator = jsonschema.Draft202012Validator(self.schema)
        return self._validator

    def problem(self, arguments: dict[str, Any]) -> str | None:
        """Why `arguments` break the schema, or None when they fit."""
        if self.check is not None and self.check(arguments):
            return None
        import jsonschema

        found = jsonschema.exceptions.best_match(self.validator().iter_errors(arguments))
        return None if found is None else _argument_problem(found)[: rules.MAX_MESSAGE]


class _Answer:
    """One answer: its wire bytes, whether it is an error, and the model when one was built."""

    __slots__ = ("failed", "model", "payload")

    def __init__(
        self, payload: bytes, failed: bool, model: ToolCallResult | DescribeResult | None = None
    ) -> None:
        self.payload = payload
        self.failed = failed
        self.model = model


class Worker:
    def __init__(
        self,
        name: str,
        version: str,
        supported_versions: tuple[str, ...] = rules.SUPPORTED_VERSIONS,
        capabilities: tuple[str, ...] = CAPABILITIES,
    ) -> None:
        """`capabilities` are declared in a 1.1 DescribeResult (the SDK itself provides
        `files` and `events` for every tool; pass () to declare none)."""
        if not (rules.TOOL_NAME.match(name) and rules.WORKER_VERSION.match(version)):
            from envelopes.v1 import WorkerInfo

            WorkerInfo(name=name, version=version)  # raises the model's ValidationError
        self._info = {"name": name, "version": version}
        self.supported_versions = supported_versions
        self.capabilities = capabilities
        self._tools: dict[str, _Tool] = {}
        self._described: dict[str, bytes] = {}

    @property
    def info(self) -> WorkerInfo:
        from envelopes.v1 import WorkerInfo

        return WorkerInfo.model_validate(self._info)

    def tool(
        self, name: str, *, description: str, input_schema: dict[str, Any], effects: Effects
    ) -> Callable[[Handler], Handler]:
        """Register `handler(arguments, request)`; it returns a str (text output), an
        output model, or any other JSON value (json output), or raises ToolError."""
        check = compile_schema(input_schema)
        if check is None:  # outside the compiled subset: jsonschema checks and validates
            import jsonschema

            jsonschema.Draft202012Validator.check_schema(input_schema)
        described = {
            "name": name,
            "description": description,
            "input_schema": input_schema,
            "effects": effects,
        }
        if not (
            rules.TOOL_NAME.match(name)
            and type(description) is str
            and len(description) <= rules.MAX_TOOL_DESCRIPTION
            and effects in rules.EFFECTS
            and type(input_schema) is dict
            and json_bounded(input_schema, exact=True, max_depth=_FAST_DEPTH)
        ):
            from envelopes.v1 import ToolDescription

            model = ToolDescription(
                name=name, description=description, input_schema=input_schema, effects=effects
            )
            described = model.to_wire()

        def register(handler: Handler) -> Handler:
            self._tools[name] = _Tool(described, check, handler)
            self._described.clear()
            return handler

        return register

    def describe(self, version: str = rules.VERSION) -> DescribeResult:
        """The DescribeResult for a describe request of `version` (1.1 and later list
        the capabilities; a 1.0 one does not)."""
        from envelopes.v1 import DescribeResult, ToolDescription

        extra: dict[str, Any] = {}
        if self.capabilities and at_least_1_1(version):
            extra["capabilities"] = list(self.capabilities)
        return DescribeResult(
            version=version,
            worker=self.info,
            supported_versions=list(self.supported_versions),
            tools=[ToolDescription.model_validate(t.description) for t in self._tools.values()],
            **extra,
        )

    def handle(self, data: bytes) -> ToolCallResult | DescribeResult:
        """Answer one request given as raw bytes, as a model; never raises."""
        answer = self.answer(data)
        if answer.model is not None:
            return answer.model
        from envelopes.v1 import DescribeResult, ToolCallResult

        doc = wire.loads(answer.payload, max_bytes=len(answer.payload))
        if doc["kind"] == "DescribeResult":
            return DescribeResult.model_validate(doc)
        return ToolCallResult.model_validate(doc)

    def answer(self, data: bytes) -> _Answer:
        """Answer one request given as raw bytes, as wire bytes; never raises."""
        request = self._fast_request(data)
        if request is None:
            from envelopes import codec
            from envelopes.v1 import DescribeRequest, ToolCallResult

            try:
                decoded = codec.decode_request(data, self.supported_versions)
            except codec.RequestError as exc:
                refusal = ToolCallResult.fail(
                    exc.request_id or UNKNOWN_ID, exc.code, exc.message, version=exc.version
                )
                return _Answer(codec.encode(refusal), True, refusal)
            if isinstance(decoded, DescribeRequest):
                return self._describe_answer(decoded.version)
            return self._call(RequestView.of_model(decoded))
        if isinstance(request, str):  # a describe request, of this version
            return self._describe_answer(request)
        return self._call(request)

    def _fast_request(self, data: bytes) -> RequestView | str | None:
        """The request when the fast checks vouch for it (its version for a describe),
        else None: the models then decide and word any refusal."""
        try:
            doc = wire.loads(data, max_bytes=rules.MAX_REQUEST_BYTES)
        except wire.WireError:
            return None
        version = doc.get("version")
        if type(version) is not str or version not in self.supported_versions:
            return None
        if not is_version(version):
            return None
        kind = doc.get("kind")
        if kind == "DescribeRequest":
            return version
        if "critical" in doc:  # must-understand: the models decide (section 3.1)
            return None
        if kind != "ToolCallRequest":
            return None
        return check_call(doc)

    def _describe_answer(self, version: str) -> _Answer:
        described = self._described.get(version)
        if described is None:
            versions = list(self.supported_versions)
            capabilities = list(self.capabilities) if at_least_1_1(version) else []
            if not (
                1 <= len(versions) <= rules.MAX_SUPPORTED_VERSIONS
                and all(type(v) is str and is_version(v) for v in versions)
                and len(self._tools) <= rules.MAX_TOOLS
                and _capabilities_ok(capabilities)
            ):
                from envelopes import codec

                model = self.describe(version)  # raises the model's error, as it always did
                return _Answer(codec.encode(model), False, model)
            doc = {
                "kind": "DescribeResult",
                "version": version,
                "worker": self._info,
                "supported_versions": versions,
                "tools": [tool.description for tool in self._tools.values()],
            }
            if capabilities:
                doc["capabilities"] = capabilities
            described = self._described[version] = wire.dumps(doc)
        return _Answer(described, False)

    def _call(self, request: RequestView) -> _Answer:
        def fail(code: str, message: str, retryable: bool = False) -> _Answer:
            sent = "INTERNAL"
            if code in _WORKER_CODES:  # else ErrorInfo raises or the runner refuses
                sent = code
            else:
                message = f"tool raised ToolError({code[:64]!r}), not a worker code: {message}"
                retryable = False
            message = message.encode("utf-8", "replace").decode("utf-8")  # lone surrogates
            flag: object = retryable  # from user code: ErrorInfo is strict about it
            if type(flag) is not bool:
                return _slow_failure(request, sent, message, flag)
            error = {"code": sent, "message": message[: rules.MAX_MESSAGE]}
            error["retryable"] = retryable  # type: ignore[assignment]
            envelope = _envelope(request, "error", "error", error)
            return _Answer(wire.dumps(envelope), True)

        inputs = _input_files(request)
        if isinstance(inputs, str):
            return fail("INVALID_REQUEST", inputs)
        tool = self._tools.get(request.tool.name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return fail("UNKNOWN_TOOL", f"no tool {request.tool.name!r}; this worker has: {known}")
        problem = tool.problem(request.arguments)
        if problem is not None:
            return fail("INVALID_ARGUMENTS", problem)
        model: ToolCallResult | None = None
        space = _Workspace(request)
        try:
            problem = space.open(inputs)
            if problem is not None:
                return fail("INTERNAL", problem)
            value = tool.handler(dict(request.arguments), request)
            collected = None if request.collect is None else _collected(request, space.path)
            try:
                output = _fast_output(value)
                if collected is not None:
                    output = _mixed([output], collected)
                payload = wire.dumps(_envelope(request, "ok", "output", output))
            except (_Slow, wire.WireError):
                from envelopes import codec
                from envelopes.v1 import ToolCallResult

                model = ToolCallResult.ok(request.id, _as_output(value, collected), request.version)
                payload = codec.encode(model)  # may fail too (e.g. RecursionError)
        except ToolError as exc:
            return fail(exc.code, exc.message, exc.retryable)
        except Exception as exc:
            import traceback

            traceback.print_exc(file=sys.stderr)
            return fail("INTERNAL", f"{type(exc).__name__}: {exc}")
        finally:
            space.close()
        if len(payload) > request.limits.max_result_bytes:
            return fail(
                "LIMIT_EXCEEDED",
                f"result is {len(payload)} bytes, over max_result_bytes="
                f"{request.limits.max_result_bytes}",
            )
        return _Answer(payload, False, model)

    def serve(self) -> None:
        """Serve one request from stdin to stdout and exit with the envelope's exit code."""
        data = sys.stdin.buffer.read(rules.MAX_REQUEST_BYTES + 1)
        # Anything the tool (or a child process) prints goes to stderr, never into the
        # envelope: fd 1 points at stderr until the answer is written on the saved fd.
        # The flush comes after the switch, so prints still buffered from before run()
        # (a banner at import time) become logs too instead of corrupting the envelope.
        envelope_fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout.flush()
        answer = self.answer(data)
        sys.stdout.flush()
        sys.stderr.flush()
        view = memoryview(answer.payload)
        while view:
            view = view[os.write(envelope_fd, view) :]
        os._exit(1 if answer.failed else 0)


class _Workspace:
    """The call's own directory (1.1): made under $TMPDIR (or /tmp) before the tool
    runs, with the input files in it, the tool's working directory while it runs, and
    removed afterwards; also the request's event emitter."""

    def __init__(self, request: RequestView) -> None:
        self.request = request
        self.path: str | None = None
        self._previous: str | None = None

    def open(self, inputs: list[tuple[str, bytes, int]]) -> str | None:
        """Make the workspace and write `inputs` there; a problem message on failure."""
        request = self.request
        try:
            self.path = files.make_workspace()
        except OSError as exc:
            if inputs or request.collect is not None:
                return f"cannot create the call's workspace: {exc}"
            # A 1.0-style call can still run where the worker was started.
            sys.stderr.write(f"worker: no workspace ({exc}); the tool runs in the cwd\n")
        try:
            self._previous = os.getcwd()
        except OSError:  # the directory the worker started in is gone
            self._previous = None
        if self.path is not None:
            try:
                files.write_files(self.path, inputs)
            except (files.FilesError, OSError) as exc:
                return f"cannot write the input files: {exc}"
            os.chdir(self.path)
        request.workspace = self.path if self.path is not None else self._previous
        budget = request.events
        if budget is not None:
            request.emit = events.Emitter(budget.max_per_second, budget.max_bytes)
        return None

    def close(self) -> None:
        request = self.request
        request.emit.close()
        request.emit = events.NULL
        if self.path is None:
            return
        try:
            os.chdir(self._previous or "/")
        except OSError:
            os.chdir("/")
        try:
            files.remove_tree(self.path)
        except OSError as exc:
            sys.stderr.write(f"worker: cannot remove the workspace {self.path}: {exc}\n")


def _input_files(request: RequestView) -> list[tuple[str, bytes, int]] | str:
    """The request's input files, decoded, or why the 1.1 members are refused. The
    fast checks and the models have vouched for their shape already; these are the
    path rules between files, which the models may word differently or not check."""
    raw = request.raw("files")
    decoded = [] if raw is None else files.check_files(raw)
    if isinstance(decoded, str):
        return decoded
    collect = request.raw("collect")
    if collect is not None:
        for index, pattern in enumerate(collect.get("patterns", ())):
            problem = files.glob_problem(pattern)
            if problem is not None:
                return f"collect.patterns[{index}]: {problem}"
    return decoded


def _collected(request: RequestView, workspace: str | None) -> list[dict[str, Any]]:
    """The `collect` of the request as output parts: one media part per file, then one
    text part naming what was skipped. Raises ToolError LIMIT_EXCEEDED over the caps."""
    import binascii

    collect = request.collect
    assert collect is not None and workspace is not None  # open() made one for collect
    try:
        found, skipped = files.collect(
            workspace, list(collect.patterns), collect.max_files, collect.max_bytes
        )
    except files.CollectLimitExceeded as exc:
        raise ToolError("LIMIT_EXCEEDED", str(exc)) from None
    except (files.FilesError, OSError) as exc:
        raise ToolError("TOOL_FAILED", f"cannot collect files from the workspace: {exc}") from None
    encoded = sum((len(data) + 2) // 3 * 4 for _, data, _ in found)
    if encoded > request.limits.max_result_bytes:
        raise ToolError(
            "LIMIT_EXCEEDED",
            f"collected files take {encoded} bytes in base64, over max_result_bytes="
            f"{request.limits.max_result_bytes}",
        )
    parts: list[dict[str, Any]] = []
    for path, data, _ in found:
        part = {
            "type": "media",
            "mime_type": files.guess_mime(path),
            "base64_data": binascii.b2a_base64(data, newline=False).decode("ascii"),
        }
        name = path.rpartition("/")[2]
        if rules.FILENAME.match(name):
            part["filename"] = name
        part["path"] = path
        parts.append(part)
    if skipped:
        lines = "\n".join(f"skipped: {path}: {why}" for path, why in skipped)
        parts.append({"type": "text", "content": lines})
    return parts


def _mixed(own: list[dict[str, Any]], collected: list[dict[str, Any]]) -> dict[str, Any]:
    _check_parts(len(own) + len(collected))
    return {"type": "mixed", "parts": [*own, *collected]}


def _check_parts(count: int) -> None:
    if count > rules.MAX_PARTS:
        raise ToolError(
            "LIMIT_EXCEEDED",
            f"the output would have {count} parts with the collected files, over {rules.MAX_PARTS}",
        )


def _capabilities_ok(capabilities: list[str]) -> bool:
    """Capabilities DescribeResult takes (rules.CAPABILITY_PATTERN, unique, at most 16)."""
    return (
        len(capabilities) <= rules.MAX_CAPABILITIES
        and len(set(capabilities)) == len(capabilities)
        and all(rules.CAPABILITY.match(c) for c in capabilities)
    )


def _envelope(
    request: RequestView | ToolCallRequest, status: str, key: str, body: Any
) -> dict[str, Any]:
    """A ToolCallResult as its model dumps it (same keys, same order)."""
    return {
        "kind": "ToolCallResult",
        "version": request.version,
        "id": request.id,
        "status": status,
        key: body,
    }


def ok_envelope(request: RequestView | ToolCallRequest, content: Any) -> dict[str, Any]:
    """The wire document of an `ok` result with JSON `content` (for sizing a result)."""
    return _envelope(request, "ok", "output", {"type": "json", "content": content})


def _fast_output(value: Any) -> dict[str, Any]:
    if type(value) is str:
        if len(value) > rules.MAX_STRING:
            raise _Slow
        return {"type": "text", "content": value}
    if not json_bounded(value, exact=True, max_depth=_FAST_DEPTH):
        raise _Slow
    return {"type": "json", "content": value}


def _slow_failure(request: RequestView, code: Any, message: str, retryable: Any) -> _Answer:
    from envelopes import codec
    from envelopes.v1 import ToolCallResult

    model = ToolCallResult.fail(request.id, code, message, retryable, request.version)
    return _Answer(codec.encode(model), True, model)


def _as_output(value: Any, collected: list[dict[str, Any]] | None = None) -> Output:
    from envelopes.v1 import JsonOutput, MediaOutput, MixedOutput, TextOutput

    output: Output
    if isinstance(value, TextOutput | JsonOutput | MediaOutput | MixedOutput):
        output = value
    elif isinstance(value, str):
        output = TextOutput(content=value)
    else:
        output = JsonOutput(content=value)
    if collected is None:
        return output
    own: list[Output] = list(output.parts) if isinstance(output, MixedOutput) else [output]
    _check_parts(len(own) + len(collected))
    parts = [MediaOutput.model_validate(p) if p["type"] == "media" else
             TextOutput.model_validate(p) for p in collected]  # fmt: skip
    return MixedOutput(parts=[*own, *parts])


def _argument_problem(problem: jsonschema.ValidationError) -> str:
    """Where the arguments break the schema and which rule, never the value itself:
    a refused value may be a secret the model pasted, and messages reach logs."""
    import json

    where = "arguments" + "".join(f"[{p!r}]" for p in problem.absolute_path)
    if problem.validator in ("required", "additionalProperties", "dependentRequired"):
        return f"{where}: {problem.message}"  # names properties, not values
    if problem.validator == "type":
        return f"{where}: the value is not of type {problem.validator_value!r}"
    rule = json.dumps(problem.validator_value, ensure_ascii=False)[:200]
    return f"{where}: the value fails {problem.validator} {rule}"


__all__ = ["UNKNOWN_ID", "RequestView", "ToolError", "Worker", "ok_envelope"]
