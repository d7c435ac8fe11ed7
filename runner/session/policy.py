"""Dispositions: what the runtime does with one tool call, and the policy that picks one.

A disposition is JSON with a `tag` (runSync, runAsync, runIsolated, defer, decorate).
`decorate` wraps an inner disposition in decorators; the first decorator is the outermost.
A policy is any callable `(context, call) -> Disposition`; `PolicyConfig` is the one an
agent file describes: exact-name rules, a default, and `*`-glob wrappers adding decorators.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from runner.isolation import EgressPolicy, EnvelopeName
from runner.llm import RequestedCall
from runner.state.dispositions import detached, unwrap_stored


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --- decorators ----------------------------------------------------------------------


class Timeout(_Spec):
    tag: Literal["timeout"] = "timeout"
    seconds: Annotated[float, Field(gt=0, le=86_400)]


class Retries(_Spec):
    """Re-run a failed call whose error says a retry can help (never bad arguments)."""

    tag: Literal["retries"] = "retries"
    count: Annotated[int, Field(ge=0, le=100)]
    backoff_ms: Annotated[int, Field(alias="backoffMs", ge=0, le=600_000)] = 200


class CacheKey(_Spec):
    """agents-exe's explicit cache key: calls sharing one share one cached result."""

    tool_name: Annotated[str, Field(alias="toolName", min_length=1, max_length=200)]
    arguments_hash: Annotated[str, Field(alias="argumentsHash", min_length=1, max_length=200)]


class Cache(_Spec):
    """Reuse an ok result of the same tool with the same canonical arguments, or, with
    `key` (a string, or agents-exe's {"toolName", "argumentsHash"}), of any call that
    names the same key, whatever its tool and arguments. A keyed entry is stored in the
    tool cache under the tool name `@cache-key` (no tool can have it) with `{"key": KEY}`
    or the object key as its arguments, so a string key and an object key never meet."""

    tag: Literal["cache"] = "cache"
    ttl_seconds: Annotated[float | None, Field(alias="ttlSeconds", gt=0)] = None
    key: Annotated[str, Field(min_length=1, max_length=400)] | CacheKey | None = None


class Label(_Spec):
    tag: Literal["label"] = "label"
    label: Annotated[str, Field(min_length=1, max_length=200)]


class Truncate(_Spec):
    tag: Literal["truncate"] = "truncate"
    max_bytes: Annotated[int, Field(alias="maxBytes", ge=1)]


AnyDecorator = Timeout | Retries | Cache | Label | Truncate
Decorator = Annotated[AnyDecorator, Field(discriminator="tag")]


# --- isolation specs -----------------------------------------------------------------


class EgressSpec(_Spec):
    """`egress` on a docker spec: the container reaches the `allow`ed `host:port`s (and
    `*.domain:port`s) through an egress proxy of its own, and nothing else. `network`:
    the Docker network the proxy reaches them through (unset: the agent's `egress_network`,
    which the commands read from $AGENTS_RUNNER_EGRESS_NETWORK; "bridge" is Docker's default
    route out). `tlsPorts`: the ports CONNECT may reach (default 443). Checked as
    EgressPolicy checks it."""

    allow: Annotated[list[str], Field(min_length=1, max_length=256)]
    network: Annotated[str | None, Field(min_length=1)] = None
    allow_addresses: Annotated[
        list[str], Field(alias="allowAddresses", max_length=256, default_factory=list)
    ]
    tls_ports: Annotated[
        list[int], Field(alias="tlsPorts", max_length=64, default_factory=lambda: [443])
    ]

    @model_validator(mode="after")
    def _valid(self) -> EgressSpec:
        self.policy()  # its ValueError names the entry and what is wrong with it
        return self

    def policy(self) -> EgressPolicy:
        return EgressPolicy(tuple(self.allow), upstream_network=self.network,
                            allow_addresses=tuple(self.allow_addresses),
                            tls_ports=tuple(self.tls_ports))  # fmt: skip


class DockerSpec(_Spec):
    """Run in a fresh container of `image`; unset limits keep ContainerLimits' defaults."""

    tag: Literal["docker"] = "docker"
    image: Annotated[str, Field(min_length=1)]
    envelope: EnvelopeName = "v1"  # v1, or agents-exe's own envelope
    memory_bytes: Annotated[int | None, Field(alias="memoryBytes", ge=6 * 1024 * 1024)] = None
    cpus: Annotated[float | None, Field(gt=0, le=256)] = None
    pids: Annotated[int | None, Field(ge=1)] = None
    tmpfs_bytes: Annotated[int | None, Field(alias="tmpfsBytes", ge=1)] = None
    network: Annotated[str | None, Field(min_length=1)] = None
    #: The engine's runtime for its containers, warm ones included: runc (unset) or runsc
    #: (gVisor), unless `--runtime` or AGENTS_RUNNER_RUNTIME says otherwise.
    runtime: Annotated[str | None, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")] = None
    timeout_seconds: Annotated[float, Field(alias="timeoutSeconds", gt=0)] = 60.0
    max_result_bytes: Annotated[int, Field(alias="maxResultBytes", ge=1)] = 1024 * 1024
    #: Warm containers a process keeps ready for this spec (unset or 0: none), unless
    #: `--pool-size` or AGENTS_RUNNER_POOL_SIZE says otherwise (runner/cli/pooling.py).
    pool: Annotated[int | None, Field(ge=0, le=64)] = None
    #: Egress through an allow-list proxy instead of no network (unset: no network).
    egress: EgressSpec | None = None

    @model_validator(mode="after")
    def _one_network(self) -> DockerSpec:
        if self.egress is not None and self.network is not None:
            raise ValueError("a docker spec takes `network` or `egress`, not both (with"
                             " egress the call gets its own internal network)")  # fmt: skip
        return self


class LocalProcessSpec(_Spec):
    """Run `argv`, or agents-exe's `path` (run with no arguments), as a local worker
    process (trusted workers only: not a sandbox)."""

    tag: Literal["localProcess"] = "localProcess"
    argv: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None
    path: Annotated[str, Field(min_length=1)] | None = None
    envelope: EnvelopeName = "v1"  # v1, or agents-exe's own envelope
    env: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: Annotated[float, Field(alias="timeoutSeconds", gt=0)] = 60.0
    max_result_bytes: Annotated[int, Field(alias="maxResultBytes", ge=1)] = 1024 * 1024

    @model_validator(mode="after")
    def _one_command(self) -> LocalProcessSpec:
        if (self.argv is None) == (self.path is None):
            raise ValueError("a localProcess spec needs exactly one of `argv` or `path`")
        return self

    @property
    def command(self) -> list[str]:
        """What is executed: `argv`, or `path` alone."""
        return list(self.argv) if self.argv is not None else [self.path or ""]


IsolationSpec = Annotated[DockerSpec | LocalProcessSpec, Field(discriminator="tag")]


# --- dispositions --------------------------------------------------------------------


class RunSync(_Spec):
    tag: Literal["runSync"] = "runSync"


class RunAsync(_Spec):
    tag: Literal["runAsync"] = "runAsync"


class RunIsolated(_Spec):
    tag: Literal["runIsolated"] = "runIsolated"
    spec: IsolationSpec
    #: Attached calls run inside the step; detached ones wait for `session run-isolated`.
    attached: bool = True


class Defer(_Spec):
    tag: Literal["defer"] = "defer"
    reason: Annotated[str, Field(min_length=1, max_length=2000)]
    #: After this long without a result the call becomes `expired` (the model is told).
    expires_after_seconds: Annotated[
        float | None, Field(alias="expiresAfterSeconds", gt=0, le=365 * 86_400)
    ] = None


class Decorate(_Spec):
    tag: Literal["decorate"] = "decorate"
    decorators: list[Decorator]
    inner: Disposition


#: A disposition that is not a decorate: what finally runs (or waits) the call.
BaseDisposition = RunSync | RunAsync | RunIsolated | Defer
AnyDisposition = BaseDisposition | Decorate
Disposition = Annotated[AnyDisposition, Field(discriminator="tag")]
Decorate.model_rebuild()
DISPOSITION: TypeAdapter[AnyDisposition] = TypeAdapter(Disposition)
#: Every disposition tag and decorator tag, from the unions that define them.
DISPOSITION_TAGS: tuple[str, ...] = tuple(
    get_args(t.model_fields["tag"].annotation)[0] for t in get_args(AnyDisposition)
)
DECORATOR_TAGS: tuple[str, ...] = tuple(
    get_args(t.model_fields["tag"].annotation)[0] for t in get_args(AnyDecorator)
)


def to_json(disposition: AnyDisposition) -> dict[str, Any]:
    return disposition.model_dump(mode="json", by_alias=True)


def from_json(data: dict[str, Any]) -> AnyDisposition:
    return DISPOSITION.validate_python(data)


def describe_json(found: dict[str, Any]) -> str:
    """A stored disposition (its JSON) in a few words, for people: `defer (why)`,
    `timeout > runIsolated`, `runIsolated (detached)`. Read from the JSON as stored, so a
    document another version wrote still shows."""
    decorators, base = unwrap_stored(found)
    tag = str(base.get("tag"))
    if tag == "defer":
        tag = f"defer ({base.get('reason')})"
    elif tag == "runIsolated":
        tag = "runIsolated" + (" (detached)" if detached(base) else "")
    return " > ".join([*(str(d.get("tag")) for d in decorators), tag])


def unwrap(disposition: AnyDisposition) -> tuple[list[AnyDecorator], BaseDisposition]:
    """(decorators outermost first, the innermost non-decorate disposition)."""
    decorators: list[AnyDecorator] = []
    while isinstance(disposition, Decorate):
        decorators.extend(disposition.decorators)
        disposition = disposition.inner
    return decorators, disposition


def rebase(disposition: AnyDisposition, base: BaseDisposition) -> AnyDisposition:
    """`disposition` with its innermost disposition replaced by `base`, decorators kept."""
    if isinstance(disposition, Decorate):
        return Decorate(decorators=disposition.decorators, inner=rebase(disposition.inner, base))
    return base


# --- policies ------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may look at besides the call itself."""

    session_id: str
    agent_slug: str
    turn: int


class ToolMatch(_Spec):
    tool: Annotated[str, Field(min_length=1)]


class WrapperMatch(_Spec):
    #: A `*` glob; without one the wrapper applies to every call (as in agents-exe).
    tool: Annotated[str, Field(min_length=1)] | None = None


class Rule(_Spec):
    """Matches on the exact tool name: `{"tool": NAME, "disposition": D}` (agents-exe's
    form) or `{"match": {"tool": NAME}, "disposition": D}`."""

    match: ToolMatch
    disposition: Disposition

    @model_validator(mode="before")
    @classmethod
    def _agents_exe_form(cls, data: Any) -> Any:
        if isinstance(data, dict) and "tool" in data:
            if "match" in data:
                raise ValueError("give the tool as `tool` or as `match.tool`, not both")
            data = {**data, "match": {"tool": data["tool"]}}
            del data["tool"]
        return data


class Wrapper(_Spec):
    """Adds decorators around whatever disposition a tool gets; `*` globs in `tool`."""

    match: WrapperMatch = Field(default_factory=WrapperMatch)
    decorators: Annotated[list[Decorator], Field(min_length=1)]


class PolicyConfig(_Spec):
    default: Disposition = Field(default_factory=RunSync)
    rules: list[Rule] = Field(default_factory=list)
    wrappers: list[Wrapper] = Field(default_factory=list)

    def __call__(self, context: PolicyContext, call: RequestedCall) -> AnyDisposition:
        chosen = next((r.disposition for r in self.rules if r.match.tool == call.name), None)
        disposition = chosen if chosen is not None else self.default
        decorators = [
            d
            for w in self.wrappers
            if w.match.tool is None or glob_matches(w.match.tool, call.name)
            for d in w.decorators
        ]
        if decorators:
            return Decorate(decorators=decorators, inner=disposition)
        return disposition


def glob_matches(pattern: str, name: str) -> bool:
    """`*` matches any run of characters; every other character matches itself."""
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), name) is not None


#: What decides a call's disposition: PolicyConfig, or any function of this shape.
Policy = Callable[[PolicyContext, RequestedCall], AnyDisposition]
