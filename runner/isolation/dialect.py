"""The envelope a worker speaks: the only part of a call that differs between dialects.

A dialect turns a v1 ToolCallRequest into the bytes written to the worker's stdin, and
the bytes read from its stdout back into a v1 ToolCallResult (MalformedOutput when they
are not one), and says which exit statuses it defines. Everything else is the runner's
and the same for every dialect: starting and hardening the worker, the deadline and the
kill, the stdout and stderr caps, and the classification of what happened (outcome.py).

- `v1` (the default): agents-runner's envelope (docs/envelope-v1.md). Exit 0 with an ok
  result, 1 with an error result.
- `agents-exe`: agents-exe's isolation envelope (envelopes/agents_exe.py), for workers
  written for agents-exe. Exit 0 always (its errors are in the envelope); no describe.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal, get_args

from envelopes import agents_exe, codec
from envelopes.v1 import ToolCallRequest, ToolCallResult

#: The envelopes a runner can speak, as an isolation spec names them.
EnvelopeName = Literal["v1", "agents-exe"]
ENVELOPES: tuple[EnvelopeName, ...] = get_args(EnvelopeName)


class UnsupportedExchange(RuntimeError):
    """The caller asked for an exchange the runner's envelope does not have."""


class Dialect(ABC):
    __slots__ = ()  # V1 holds nothing: one instance serves every runner
    name: EnvelopeName
    #: Whether workers of this dialect answer a DescribeRequest.
    describes: bool
    #: The exit statuses the dialect defines; any other is a crash.
    exit_statuses: tuple[int, ...]
    #: Why another status is a crash, for the error message.
    exit_rule: str

    @abstractmethod
    def encode(self, request: ToolCallRequest) -> bytes:
        """The worker's stdin for `request`; ValueError when it cannot be expressed."""

    @abstractmethod
    def decode(self, data: bytes, request: ToolCallRequest) -> ToolCallResult:
        """The worker's stdout as its result for `request`; codec.MalformedOutput if not."""

    @abstractmethod
    def expected_exit(self, result: ToolCallResult) -> int:
        """The exit status that must come with `result`."""


class V1(Dialect):
    __slots__ = ()
    name: EnvelopeName = "v1"
    describes = True
    exit_statuses = (0, 1)
    exit_rule = "only 0 and 1 are defined"

    def encode(self, request: ToolCallRequest) -> bytes:
        return codec.encode(request)

    def decode(self, data: bytes, request: ToolCallRequest) -> ToolCallResult:
        return codec.decode_result(data, request)

    def expected_exit(self, result: ToolCallResult) -> int:
        return 0 if result.status == "ok" else 1


class AgentsExe(Dialect):
    """agents-exe's envelope; `default_policy` is the disposition a request without an
    `agents-exe/policy` extension is sent with (the runner's own spec)."""

    name: EnvelopeName = "agents-exe"
    describes = False
    exit_statuses = (0,)
    exit_rule = "an agents-exe worker exits 0 and reports errors in its envelope"

    def __init__(self, default_policy: dict[str, Any]) -> None:
        self.default_policy = default_policy

    def encode(self, request: ToolCallRequest) -> bytes:
        return agents_exe.encode_request(request, self.default_policy)

    def decode(self, data: bytes, request: ToolCallRequest) -> ToolCallResult:
        return agents_exe.decode_result(data, request)

    def expected_exit(self, result: ToolCallResult) -> int:
        return 0


V1_DIALECT = V1()


def dialect_for(envelope: str, default_policy: dict[str, Any]) -> Dialect:
    """The dialect an isolation spec's `envelope` names; ValueError for an unknown one."""
    if envelope == "v1":
        return V1_DIALECT
    if envelope == "agents-exe":
        return AgentsExe(default_policy)
    raise ValueError(f"unknown envelope {envelope!r}; expected one of {', '.join(ENVELOPES)}")
