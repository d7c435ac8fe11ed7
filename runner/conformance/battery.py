"""Run the conformance battery against one worker through a runner, and judge the answers.

Every probe is one exchange through the runner's `exchange()` (the same path real calls
take), with its own deadline, so a worker that hangs costs one probe timeout, never the
run. Answers are judged here from the raw bytes: the runner's own classification would
hide what exactly went wrong (e.g. an UNSUPPORTED_VERSION answer whose version differs
from the request's is correct, but the runner sees a version mismatch).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import anyio
from pydantic import ValidationError

from envelopes import wire
from envelopes.codec import describe_validation_error
from envelopes.controls import has_control_characters
from envelopes.v1 import (
    RUNNER_ERROR_CODES,
    DescribeResult,
    ToolCallResult,
    ToolDescription,
    highest_version,
)
from runner.conformance import probes
from runner.conformance.lint import lint_schema
from runner.conformance.report import Level, Report
from runner.isolation.base import ExchangeRunner
from runner.isolation.outcome import Exchange

#: The largest answer read back from a probe: big enough to see a worker overshoot
#: max_result_bytes instead of being cut off by the runner.
ANSWER_CAP = 4 * 1024 * 1024
#: The environment a checked worker should see: asks it for verbose logs, which must
#: still go to stderr (the runner that builds the worker's process passes this).
VERBOSE_ENV = MappingProxyType({"AGENTS_RUNNER_LOG_LEVEL": "debug"})
#: The smallest happy result that the LIMIT_EXCEEDED probe can shrink under (room for
#: an error envelope must remain).
MIN_LIMIT_PROBE_BYTES = 512

_UNSUPPORTED = ("2.0", "0.9", "1.999")


@dataclass
class Answer:
    """One probe's exchange and, when the worker answered properly, its result."""

    label: str
    exchange: Exchange
    result: ToolCallResult | None = None
    problem: str = ""  # why there is no usable result

    @property
    def seconds(self) -> float:
        return self.exchange.duration_ms / 1000

    def said(self) -> str:
        """What the worker answered, in a few words, for a failing check's detail."""
        if self.result is None:
            return self.problem
        if self.result.error is not None:
            return f"{self.result.error.code}: {self.result.error.message[:160]}"
        return f"status ok ({self.result.output.type if self.result.output else '?'} output)"

    def exit_code_matches(self) -> bool:
        if self.result is None:
            return True  # reported as a missing answer instead
        return self.exchange.exit_code == (0 if self.result.status == "ok" else 1)


def judge(label: str, ex: Exchange) -> Answer:
    """Turn an exchange into an Answer: a hang, a crash or bad output become a problem."""
    answer = Answer(label, ex)
    if ex.intervention == "timeout":
        answer.problem = f"no answer within {ex.duration_ms / 1000:.1f}s (hung?)"
    elif ex.intervention is not None:
        answer.problem = f"the runner stepped in ({ex.intervention}): {ex.detail}"
    elif ex.signal is not None:
        answer.problem = f"killed by signal {ex.signal}"
    elif ex.exit_code not in (0, 1):
        answer.problem = f"exited with status {ex.exit_code} (only 0 and 1 are defined)"
    else:
        answer.result, answer.problem = _parse_result(ex.stdout)
    lines = ex.stderr_tail.decode("utf-8", "replace").strip().splitlines()
    if answer.problem and lines:
        answer.problem += f" (stderr: {lines[-1][:160]})"
    return answer


def _parse_result(stdout: bytes) -> tuple[ToolCallResult | None, str]:
    try:
        doc = wire.loads(stdout, max_bytes=ANSWER_CAP)
    except wire.WireError as exc:
        return None, f"stdout is not exactly one JSON document: {exc.reason}"
    if doc.get("kind") != "ToolCallResult":
        return None, f"kind: expected 'ToolCallResult', got {str(doc.get('kind'))[:40]!r}"
    try:
        result = ToolCallResult.model_validate(doc)
    except ValidationError as exc:
        return None, f"invalid ToolCallResult: {describe_validation_error(exc)}"
    if result.error is not None and result.error.code in RUNNER_ERROR_CODES:
        return None, f"error.code {result.error.code} may only be produced by the runner"
    return result, ""


class Battery:
    """The probes of one worker-check run, sharing one runner and one report."""

    def __init__(
        self,
        runner: ExchangeRunner,
        fixtures: dict[str, dict[str, Any]],
        report: Report,
        probe_timeout_s: float,
        concurrency: int,
    ) -> None:
        self.runner = runner
        self.fixtures = fixtures
        self.report = report
        self.timeout_s = probe_timeout_s
        self.limiter = anyio.CapacityLimiter(concurrency)
        self.answers: list[Answer] = []
        #: The 1.1 capabilities the worker declares (capabilities.negotiate sets them).
        self.declared: frozenset[str] = frozenset()
        #: The versions the worker lists (describe sets them).
        self.supported: list[str] = ["1.0"]

    @property
    def highest(self) -> str:
        """The version a refusal of an unreadable or unspoken request carries (section 8.2)."""
        return highest_version(self.supported)

    async def send(self, label: str, payload: bytes) -> Answer:
        async with self.limiter:
            deadline_ms = int((time.time() + self.timeout_s) * 1000)
            ex = await self.runner.exchange(payload, deadline_ms, ANSWER_CAP, f"wc-{label}")
        answer = judge(label, ex)
        self.answers.append(answer)
        return answer

    # --- describe and schemas ----------------------------------------------------------

    async def describe(self) -> DescribeResult | None:
        outcome = await self.runner.describe(self.timeout_s)
        self.answers.append(Answer("describe", outcome.exchange, problem=outcome.message))
        if outcome.describe is None:
            self.report.add("describe.valid", "fail", f"{outcome.error_code}: {outcome.message}")
            return None
        described = outcome.describe
        self.supported = list(described.supported_versions)
        names = ", ".join(t.name for t in described.tools) or "none"
        self.report.add(
            "describe.valid",
            "pass",
            f"{described.worker.name} {described.worker.version}; tools: {names}",
        )
        if "1.0" in described.supported_versions:
            self.report.add(
                "describe.versions", "pass", f"supports {', '.join(described.supported_versions)}"
            )
        else:
            self.report.add(
                "describe.versions",
                "fail",
                f"supported_versions {described.supported_versions} lacks 1.0",
            )
        if not described.tools:
            self.report.add("describe.tools", "fail", "the worker declares no tools")
        for tool in described.tools:
            problems = lint_schema(tool.input_schema)
            detail = "; ".join(problems[:5]) + (
                f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
            )
            self.report.add(
                f"schema.{tool.name}",
                "fail" if problems else "pass",
                detail or "closed and bounded",
            )
        return described

    # --- probes ------------------------------------------------------------------------

    def expect_error(
        self,
        check_id: str,
        answer: Answer,
        code: str,
        echo_id: str | None,
        level: Level = "required",
    ) -> None:
        result = answer.result
        if result is None or result.error is None or result.error.code != code:
            self.report.add(check_id, "fail", f"expected {code}, got {answer.said()}", level)
        elif echo_id is not None and result.id != echo_id:
            self.report.add(
                check_id,
                "fail",
                f"{code}, but id {result.id!r} is not the request's {echo_id!r}",
                level,
            )
        else:
            self.report.add(check_id, "pass", f"{code} in {answer.seconds:.2f}s", level)

    def expect_refusal(self, check_id: str, answer: Answer) -> None:
        """The `required` verdict on a request that must not run: the worker ended by
        itself within the probe's deadline with an error envelope or a non-zero exit."""
        ex, result = answer.exchange, answer.result
        if ex.intervention is not None:
            self.report.add(check_id, "fail", answer.problem)
        elif result is not None and result.status == "ok":
            self.report.add(check_id, "fail", "answered status ok to a request it must refuse")
        elif result is not None and result.error is not None:
            self.report.add(
                check_id, "pass", f"refused ({result.error.code}) in {answer.seconds:.2f}s"
            )
        elif ex.signal is not None or ex.exit_code != 0:
            how = f"signal {ex.signal}" if ex.signal is not None else f"status {ex.exit_code}"
            self.report.add(
                check_id, "pass", f"exited with {how} in {answer.seconds:.2f}s, no error envelope"
            )
        else:
            self.report.add(check_id, "fail", f"exit status 0 without an error: {answer.problem}")

    async def happy(self, tool: ToolDescription) -> Answer | None:
        check_id = f"call.{tool.name}"
        if tool.name not in self.fixtures:
            self.report.add(check_id, "skip", f"no fixture for {tool.name!r} (--fixture FILE)")
            return None
        document = probes.request(f"call-{tool.name}", tool.name, self.fixtures[tool.name])
        answer = await self.send(check_id, probes.encode(document))
        result = answer.result
        if result is None or result.status != "ok":
            self.report.add(check_id, "fail", f"expected status ok, got {answer.said()}")
            return answer
        self.report.add(check_id, "pass", f"ok in {answer.seconds:.2f}s")
        echoed = result.id == document["id"] and result.version == document["version"]
        self.report.add(
            f"echo.{tool.name}",
            "pass" if echoed else "fail",
            f"id {result.id!r} and version {result.version!r}"
            + ("" if echoed else f"; expected {document['id']!r} and {document['version']!r}"),
        )
        return answer

    async def versions(self, tool: str, supported: list[str]) -> None:
        for version in _UNSUPPORTED:
            check_id = f"version.{version}"
            document = probes.request(check_id, tool, self.fixtures.get(tool, {}), version=version)
            answer = await self.send(check_id, probes.encode(document))
            self.expect_error(check_id, answer, "UNSUPPORTED_VERSION", document["id"])
            error = answer.result.error if answer.result else None
            if error is not None and error.code == "UNSUPPORTED_VERSION":
                missing = [v for v in supported if v not in error.message]
                wrong = answer.result.version if answer.result else None
                if missing or wrong != self.highest:
                    self.report.checks.pop()
                    self.report.add(
                        check_id,
                        "fail",
                        f"the message does not list the supported {missing}:"
                        f" {error.message[:120]!r}"
                        if missing
                        # R16: the answer cannot be in the version it does not speak.
                        else f"UNSUPPORTED_VERSION in version {wrong!r}, not the worker's"
                        f" highest {self.highest!r}",
                    )

    async def malformed(self) -> None:
        """The malformed requests of section 1.1 and rules 2 and 3 of section 8.1; then
        the version and id their refusals carry (section 8.2, `strict`)."""
        answers: dict[str, Answer] = {}

        async def one(check_id: str, payload: bytes) -> None:
            answer = answers[check_id] = await self.send(check_id, payload)
            self.expect_refusal(check_id, answer)
            self.expect_error(f"{check_id}.strict", answer, "INVALID_REQUEST", None, "strict")

        async with anyio.create_task_group() as group:
            for check_id, payload in {**probes.malformed(), **probes.version_grammar()}.items():
                group.start_soon(one, check_id, payload)
        self._refusal_envelopes(answers)

    def _refusal_envelopes(self, answers: dict[str, Answer]) -> None:
        enveloped = {i: a.result for i, a in sorted(answers.items()) if a.result is not None}
        wrong_version = [
            f"{i}: {r.version!r}"
            for i, r in enveloped.items()
            if i in probes.REFUSED_BEFORE_VERSION and r.version != self.highest
        ]
        self.report.add(
            "version.refusal",
            "fail" if wrong_version else "pass",
            f"expected the worker's highest version {self.highest!r}: "
            + "; ".join(wrong_version[:3])
            if wrong_version
            else f"{len(enveloped)} refusals in the worker's highest version {self.highest!r}",
            "strict",
        )
        wrong_id = [
            f"{i}: {r.id[:40]!r}"
            for i, r in enveloped.items()
            if i in probes.NO_VALID_ID and r.id != probes.RESERVED_ID
        ]
        self.report.add(
            "request.reserved_id",
            "fail" if wrong_id else "pass",
            f"expected the reserved id {probes.RESERVED_ID!r}: " + "; ".join(wrong_id[:3])
            if wrong_id
            else f"refusals of requests without a valid id carry {probes.RESERVED_ID!r}",
            "strict",
        )

    async def critical(self, tool: ToolDescription) -> None:
        """`critical` (section 3.1, R7), for a worker that lists 1.1: what it names and
        the worker does not implement is refused with INVALID_REQUEST, what it
        implements runs."""
        if probes.V1_1 not in self.supported:
            self.report.add("critical", "skip", "the worker does not list 1.1")
            return
        if tool.name not in self.fixtures:
            self.report.add("critical", "skip", f"no fixture for {tool.name!r} (--fixture FILE)")
            return
        arguments = self.fixtures[tool.name]

        async def one(check_id: str, extra: Mapping[str, Any]) -> None:
            document = probes.request(check_id, tool.name, arguments, version=probes.V1_1, **extra)
            answer = await self.send(check_id, probes.encode(document))
            if check_id != "critical.understood":
                self.expect_error(check_id, answer, "INVALID_REQUEST", document["id"])
                return
            ok = answer.result is not None and answer.result.status == "ok"
            self.report.add(
                check_id,
                "pass" if ok else "fail",
                "a critical list naming what it implements is accepted"
                if ok
                else f"expected status ok, got {answer.said()}",
            )

        async with anyio.create_task_group() as group:
            cases = {**probes.CRITICAL_REFUSED, "critical.understood": probes.CRITICAL_UNDERSTOOD}
            for check_id, extra in cases.items():
                group.start_soon(one, check_id, extra)

    async def unknown_fields(self, tool: ToolDescription) -> None:
        check_id = "request.unknown_fields"
        if tool.name not in self.fixtures:
            self.report.add(check_id, "skip", f"no fixture for {tool.name!r}")
            return
        document = probes.request(
            check_id,
            tool.name,
            self.fixtures[tool.name],
            extensions={"worker-check.example/unknown": {"a": [1, 2]}},
            x_future_field={"added_in": "1.9"},
        )
        answer = await self.send(check_id, probes.encode(document))
        ok = answer.result is not None and answer.result.status == "ok"
        self.report.add(
            check_id,
            "pass" if ok else "fail",
            "unknown extension and field ignored"
            if ok
            else f"expected status ok, got {answer.said()}",
        )

    async def unknown_tool(self) -> None:
        document = probes.request("tool.unknown", "worker-check-no-such-tool", {"q": probes.CANARY})
        answer = await self.send("tool.unknown", probes.encode(document))
        self.expect_error("tool.unknown", answer, "UNKNOWN_TOOL", document["id"])

    async def bad_arguments(self, tool: ToolDescription) -> None:
        check_id = "arguments.invalid"
        arguments = probes.bad_arguments(self.fixtures.get(tool.name, {}), tool.input_schema)
        document = probes.request(check_id, tool.name, arguments)
        answer = await self.send(check_id, probes.encode(document))
        self.expect_error(check_id, answer, "INVALID_ARGUMENTS", document["id"])
        leaked = [
            name
            for name, data in (
                ("stdout", answer.exchange.stdout),
                ("stderr", answer.exchange.stderr_tail),
            )
            if probes.CANARY.encode() in data
        ]
        self.report.add(
            "secrets.canary",
            "fail" if leaked else "pass",
            f"an argument's value was repeated on {' and '.join(leaked)}"
            if leaked
            else "a refused argument's value appears on neither stdout nor stderr",
        )

    async def deadline(self, tool: ToolDescription) -> None:
        check_id = "deadline.expired"
        if tool.name not in self.fixtures:
            self.report.add(check_id, "skip", f"no fixture for {tool.name!r}", level="advisory")
            return
        document = probes.request(check_id, tool.name, self.fixtures[tool.name], seconds=-1)
        answer = await self.send(check_id, probes.encode(document))
        error = answer.result.error if answer.result else None
        if error is not None and error.code == "DEADLINE_EXCEEDED":
            self.report.add(
                check_id, "pass", f"DEADLINE_EXCEEDED in {answer.seconds:.2f}s", level="advisory"
            )
        elif answer.result is not None:
            self.report.add(
                check_id,
                "warn",
                f"a request whose deadline_ms had passed got {answer.said()};"
                " the runner will kill such a worker at the deadline",
                level="advisory",
            )
        else:  # no answer at all (a hang, a crash): required, as for every request
            self.report.add(check_id, "fail", f"expected DEADLINE_EXCEEDED, got {answer.said()}")

    async def result_limit(self, tool: ToolDescription, happy: Answer | None) -> None:
        check_id = f"limit.{tool.name}"
        if happy is None or happy.result is None or happy.result.status != "ok":
            self.report.add(check_id, "skip", "needs a passing happy call")
            return
        size = len(happy.exchange.stdout.strip())
        if size < MIN_LIMIT_PROBE_BYTES:
            self.report.add(
                check_id,
                "skip",
                f"the happy result of {tool.name!r} is {size} bytes; a fixture"
                f" with a result over {MIN_LIMIT_PROBE_BYTES} bytes enables this check",
            )
            return
        limit = size - 1
        document = probes.request(
            check_id, tool.name, self.fixtures[tool.name], max_result_bytes=limit
        )
        answer = await self.send(check_id, probes.encode(document))
        written = len(answer.exchange.stdout.strip())
        if answer.result is not None and written > limit:
            self.report.add(
                check_id, "fail", f"wrote {written} bytes with max_result_bytes={limit}"
            )
        elif answer.result is not None and answer.result.status == "ok":
            # Cutting the output to fit (and saying so in it) is as good as refusing.
            self.report.add(check_id, "pass", f"fitted its result into {written} bytes")
        else:
            self.expect_error(check_id, answer, "LIMIT_EXCEEDED", document["id"])

    # --- properties of every exchange ----------------------------------------------------

    def summarize(self) -> None:
        answered = [
            a for a in self.answers if a.exchange.intervention is None and a.exchange.signal is None
        ]
        impure = []
        for answer in answered:
            if answer.exchange.stdout.strip():
                try:
                    wire.loads(answer.exchange.stdout, max_bytes=ANSWER_CAP)
                except wire.WireError as exc:
                    impure.append(f"{answer.label}: {exc.reason}")
        self.report.add(
            "stdout.pure",
            "fail" if impure else "pass",
            "; ".join(impure[:3])
            if impure
            else f"{len(answered)} answers, each exactly one JSON document (verbose logging on)",
        )
        wrong_exit = [
            f"{a.label}: status {a.result.status} with exit {a.exchange.exit_code}"
            for a in self.answers
            if a.result is not None and not a.exit_code_matches()
        ]
        self.report.add(
            "exit_code",
            "fail" if wrong_exit else "pass",
            "; ".join(wrong_exit[:3]) or "0 with ok, 1 with error, on every answer",
        )
        findings = [
            a.label
            for a in self.answers
            if a.result and a.result.output and has_control_characters(a.result.output.to_wire())
        ]
        self.report.add(
            "output.controls",
            "warn" if findings else "pass",
            f"ANSI, bidi or other control characters in the output of {', '.join(findings)}"
            if findings
            else "no ANSI, bidi or other control characters in outputs",
            level="advisory",
        )
