"""An agent is a JSON file: who it is, which LLM, which tools, and how calls are run.

`load_agent(path)` reads and checks it; every mistake is reported with its path in the file
(`toolCallPolicyConfig.rules[0].disposition.tag: ...`). A scripted provider's script is read
at load time and kept in the definition, so the stored definition is all a later process
needs, and its hash (`Agent.hash`) changes when anything that matters changes.

Files written for agents-exe load as they are, tagged (`{"tag": "OpenAIAgentDescription",
"contents": {...}}`, as agents-exe writes them) or not: without a `provider` the agent uses
the OpenAI-compatible endpoint configured from the environment (`EnvironmentProvider`:
OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL, read at the first model call, so loading
and `session start` need no key); agents-exe's `modelUrl`, `modelName`, `flavor` (the
OpenAI-compatible ones), `systemPrompt` (a string or a list of lines) and `announce` (a
description, not used) are read into that provider and `system_prompt`. Its `apiKeyId`
names a key in agents-exe's keys file: the command that loads the file resolves it
(`load_agent(path, keys)`), and the value stays in the loaded Agent (never in its
document, so never in the store). Fields agents-runner does not read yet (NOT_YET) are
refused naming the field, unless empty. Tools the policy names need not be declared in
`tools` (see `stepper._track` for what a call to an undeclared tool does).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from envelopes.codec import describe_validation_error
from runner.llm import EnvironmentProvider as EnvironmentProvider  # re-exported
from runner.llm import OpenAIProvider as OpenAIProvider  # re-exported
from runner.llm import ProviderConfig, ScriptedLLM
from runner.llm import ScriptedProvider as ScriptedProvider  # re-exported
from runner.llm.keys import ApiKeys
from runner.session.bash_tools import (
    BASH_RUNNER_IMAGE,
    BashScript,
    ToolboxError,
    describe_toolboxes,
)
from runner.session.policy import PolicyConfig
from runner.session.schemas import Compiled, compile_schema
from runner.session.secrets import Keyring, has_secrets, redact, redacted_names
from runner.state.effects import Effects

logger = logging.getLogger(__name__)


class AgentError(ValueError):
    """An agent definition that cannot be used; the message says where and why."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ToolSpec(_Spec):
    """A tool the model may call. `builtin` tools are Python functions registered by name
    in runner.tools; `bash` runs a script (only isolated); `external` tools are done by
    someone else (a deferred call completed with `session complete`).

    `effects` tells recovery what re-running an interrupted call could do: `none` or
    `contained` (no network, no mounts: the sandbox is gone) are re-run; `external`
    calls whose outcome is unknown wait for an operator instead (runner.state.effects)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")]
    kind: Literal["builtin", "bash", "external"] = "builtin"
    effects: Effects = "contained"
    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the arguments (draft 2020-12).",
    )
    #: An agents-exe bash tool's script and its `describe` (runner.session.bash_tools).
    script: BashScript | None = None

    @model_validator(mode="after")
    def _script_is_bash(self) -> ToolSpec:
        if self.script is not None and self.kind != "bash":
            raise ValueError("only a tool of kind bash has a `script`")
        return self

    @cached_property
    def arguments_check(self) -> Compiled:
        """`parameters` compiled, once for this definition (runner.session.schemas): a
        tool is frozen, and a copy with changes compiles its own. (Not a field: equality,
        hashing and the stored document ignore it.)"""
        return compile_schema(self.parameters)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copied = super().model_copy(update=update, deep=deep)
        if update or deep:
            copied.__dict__.pop("arguments_check", None)
        return copied


#: The `provider` section; the models live in runner.llm and are re-exported here.
Provider = ProviderConfig


class YieldOnTimeout(_Spec):
    tag: Literal["yieldOnTimeout"] = "yieldOnTimeout"
    milliseconds: Annotated[int, Field(ge=0)]


YieldStrategy = Literal["yieldWhenAllDone", "yieldOnAnyProgress"] | YieldOnTimeout


class LlmRetries(_Spec):
    """The budget of one model call (`llmRetries`): attempts in all, counted in the store
    before each request, with exponential backoff and jitter between them (the first wait
    is about `backoffMs`, each next one about twice the last, never over `maxBackoffMs`).
    The engine owns these retries: the provider it drives makes one request per attempt."""

    max_attempts: int = Field(default=4, ge=1, le=100, alias="maxAttempts")
    backoff_ms: int = Field(default=1000, ge=0, alias="backoffMs")
    max_backoff_ms: int = Field(default=60_000, ge=0, alias="maxBackoffMs")


class Agent(_Spec):
    slug: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]
    #: Without one: the OpenAI-compatible endpoint the environment configures.
    provider: Provider = Field(default_factory=EnvironmentProvider)
    system_prompt: str = ""
    tools: list[ToolSpec] = Field(default_factory=list)
    execution_mode: Literal["synchronous", "asynchronous"] = Field(
        default="synchronous", alias="executionMode"
    )
    policy: PolicyConfig = Field(default_factory=PolicyConfig, alias="toolCallPolicyConfig")
    async_yield_strategy: YieldStrategy = Field(
        default="yieldWhenAllDone", alias="asyncYieldStrategy"
    )
    max_concurrency: int = Field(default=4, ge=1, le=256, alias="maxConcurrency")
    async_call_timeout_seconds: float | None = Field(
        default=None, gt=0, alias="asyncCallTimeoutSeconds"
    )
    llm_retries: LlmRetries = Field(default_factory=LlmRetries, alias="llmRetries")
    _hash: str | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _tool_names_unique(self) -> Agent:
        names = [t.name for t in self.tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"tool names must be unique; repeated: {', '.join(duplicates)}")
        return self

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)

    def effects_of(self, tool: str) -> Effects:
        """What a call of `tool` may do outside: as declared, or `external` for a tool the
        file does not declare (nothing says it is safe to run or hand out twice)."""
        spec = self.tool(tool)
        return spec.effects if spec is not None else "external"

    def to_document(self) -> dict[str, Any]:
        """The definition as stored, hashed and shown: env values redacted
        (runner.session.secrets); the Agent itself keeps them for its calls."""
        return redact(self.model_dump(mode="json", by_alias=True))

    @property
    def secrets_key(self) -> str:
        """What a definition's secrets are remembered under: the hash of its stored
        document, execution mode aside (commands choose it)."""
        document = self.to_document()
        document.pop("executionMode", None)
        canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def secret_names(self) -> list[str]:
        """The env names whose values this definition lacks (it was read from a store
        and this process never saw the definition that has them)."""
        return redacted_names(self.model_dump(mode="json", by_alias=True))

    @property
    def hash(self) -> str:
        """SHA-256 of the canonical document, computed once: an agent is frozen, and a
        copy with changes (`model_copy(update=...)`) computes its own."""
        if self._hash is None:
            canonical = json.dumps(self.to_document(), sort_keys=True, separators=(",", ":"))
            self._hash = hashlib.sha256(canonical.encode()).hexdigest()
        return self._hash

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copied = super().model_copy(update=update, deep=deep)
        if update:
            copied._hash = None
        return copied

    def with_mode(self, mode: Literal["synchronous", "asynchronous"]) -> Agent:
        return self.model_copy(update={"execution_mode": mode})


def error_path(loc: tuple[Any, ...]) -> str:
    """pydantic's location as a path in the file; union branch names are left out."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in _UNION_BRANCHES or _GENERATED.match(str(part)):
            continue
        else:
            path += f".{part}" if path else str(part)
    return path or "(document)"


#: Names pydantic puts in a location for the branch of a union it tried; not in the file.
_UNION_BRANCHES = frozenset({"runSync", "runAsync", "runIsolated", "defer", "decorate",
                             "docker", "localProcess", "timeout", "retries", "cache", "label",
                             "truncate", "scripted", "openaiCompatible", "environment",
                             "yieldOnTimeout"})  # fmt: skip
_GENERATED = re.compile(r"^(literal\[|function-|constrained-|str$|[A-Z][A-Za-z]+$)")


def describe(exc: ValidationError, limit: int = 3) -> str:
    """The first errors, each at its path in the file; a field in the wrong object says
    where it belongs (`"attached"` inside a spec: on the runIsolated disposition)."""
    return describe_validation_error(exc, limit, model=Agent, path=error_path)


def parse_agent(
    document: Any,
    where: str = "agent",
    keys: ApiKeys | None = None,
    *,
    keyring: Keyring | None = None,
    _file: bool = False,
) -> Agent:
    """The agent `document` describes, ours or agents-exe's (tagged or not); `keys` gives
    the value of its `apiKeyId`, if it has one (a stored document has none: its agent is
    answered with the definition `keyring` remembered, as for env values)."""
    if not isinstance(document, dict):
        raise AgentError(f"{where}: expected a JSON object, got {type(document).__name__}")
    document, where = _unwrap(document, where)
    document = _from_agents_exe(document, where, read_toolboxes=_file)
    try:
        agent = Agent.model_validate(document)
    except ValidationError as exc:
        raise AgentError(f"{where}: {describe(exc)}") from None
    if keys is not None:
        agent = _with_key(agent, keys)
    if isinstance(agent.provider, ScriptedProvider) and agent.provider.responses is not None:
        try:
            ScriptedLLM(agent.provider.responses)
        except ValueError as exc:
            raise AgentError(f"{where}: provider: {exc}") from None
    # With a `keyring`: a definition with secret values (or a key) is remembered in it; a
    # stored (redacted) one is answered with the remembered definition, if it has it.
    if keyring is not None:
        if has_secrets(document) or _holds_key(agent):
            remember(agent, keyring)
        elif redacted_names(document) or _key_id(agent) is not None:
            return with_secrets(agent, keyring)
    return agent


def _key_id(agent: Agent) -> str | None:
    provider = agent.provider
    return provider.api_key_id if isinstance(provider, EnvironmentProvider) else None


def _holds_key(agent: Agent) -> bool:
    provider = agent.provider
    return isinstance(provider, EnvironmentProvider) and provider.has_key


def remember(agent: Agent, keyring: Keyring) -> None:
    """Keep `agent`'s secret values (and its API key) in `keyring`, for the stored
    documents of it its owner reads."""
    if has_secrets(agent.model_dump(mode="json", by_alias=True)) or _holds_key(agent):
        keyring.remember(agent.secrets_key, agent)


def remember_files(directory: Path, keyring: Keyring, keys: ApiKeys | None = None) -> int:
    """Read every agent file (`*.json`) in `directory` so that its secret values are
    remembered in `keyring` (runner.session.secrets); the number read. A file that does
    not load is logged and passed over: a directory may hold other JSON files."""
    read = 0
    for path in sorted(directory.glob("*.json")):
        try:
            remember(load_agent(path, keys), keyring)
        except AgentError as exc:
            logger.info("not an agent file (its secrets are not remembered): %s", exc)
        else:
            read += 1
    return read


def with_secrets(agent: Agent, keyring: Keyring) -> Agent:
    """`agent` with the secret values of the definition `keyring` remembers it was
    stored from (in `agent`'s execution mode), or `agent` itself when there is none."""
    known = keyring.known(agent.secrets_key)
    if not isinstance(known, Agent):
        return agent
    return known if known.execution_mode == agent.execution_mode else known.with_mode(
        agent.execution_mode)  # fmt: skip


#: agents-exe's names for what our `provider` and `system_prompt` hold.
_AGENTS_EXE_MODEL_FIELDS = ("modelUrl", "modelName", "flavor", "apiKeyId")
#: agents-exe's model flavors that speak OpenAI's chat-completions API (all of them but
#: ClaudeV1), in the spellings its parser accepts.
_OPENAI_FLAVORS = ("OpenAIv1", "openai-v1", "KimiV1", "kimiv1", "MistralV1", "mistral-v1")
#: The tag of agents-exe's agent document (`{"tag": ..., "contents": {...}}`).
AGENTS_EXE_TAG = "OpenAIAgentDescription"
#: agents-exe's agent-file fields agents-runner does not read yet, and what to do instead.
#: An empty list (or null) is accepted: it asks for nothing.
NOT_YET: Mapping[str, str] = MappingProxyType(
    {
        "extraAgents": "sub-agents are not offered as tools yet",
        "mcpServers": "MCP servers are not connected yet",
        "openApiToolboxes": "OpenAPI toolboxes are not read yet",
        "postgrestToolboxes": "PostgREST toolboxes are not read yet",
        "builtinToolboxes": "agents-exe's builtin toolboxes are not provided; declare `tools`",
        "skillSources": "skills are not read yet",
        "autoEnableSkills": "skills are not read yet",
    }
)
_TOOLBOX_FIELDS = ("bashToolboxes", "toolDirectory")
_AGENTS_EXE_FIELDS = ("announce", "systemPrompt", *_AGENTS_EXE_MODEL_FIELDS, *NOT_YET,
                      *_TOOLBOX_FIELDS)  # fmt: skip


def _unwrap(document: dict[str, Any], where: str) -> tuple[dict[str, Any], str]:
    """The agent of agents-exe's tagged document (`{"tag": "OpenAIAgentDescription",
    "contents": {...}}`) and where it is, or the document itself when it is not one."""
    if "contents" not in document and document.get("tag") != AGENTS_EXE_TAG:
        return document, where
    extra = sorted(set(document) - {"tag", "contents"})
    if extra:
        raise AgentError(f"{where}: {extra[0]}: a tagged agent document has only `tag` and"
                         " `contents`")  # fmt: skip
    if document.get("tag") != AGENTS_EXE_TAG:
        raise AgentError(f"{where}: tag: expected {AGENTS_EXE_TAG!r} (agents-exe's agent"
                         f" document), got {document.get('tag')!r}")  # fmt: skip
    contents = document.get("contents")
    if not isinstance(contents, dict):
        raise AgentError(f"{where}: contents: expected the agent, a JSON object")
    return contents, f"{where}: contents"


def _from_agents_exe(
    document: dict[str, Any], where: str, read_toolboxes: bool = False
) -> dict[str, Any]:
    """agents-exe's fields read into ours (see the module docstring); a document
    without them is returned as it is. Bash toolboxes are read (their scripts asked
    `describe`) only when `read_toolboxes`: for an agent file, never for a document a
    request or a store gives."""
    if not any(name in document for name in _AGENTS_EXE_FIELDS):
        return document
    out = {k: v for k, v in document.items() if k not in _AGENTS_EXE_FIELDS}
    toolboxes = _toolboxes(document, where)
    if toolboxes:
        if not read_toolboxes:
            raise AgentError(f"{where}: bashToolboxes: only an agent file's toolboxes are read"
                             " (their scripts are run to describe them)")  # fmt: skip
        try:
            described = describe_toolboxes(toolboxes, f"{where}: bashToolboxes")
        except ToolboxError as exc:
            raise AgentError(str(exc)) from None
        out["tools"] = [*document.get("tools", []), *described]
        out["toolCallPolicyConfig"] = _sandboxed(document.get("toolCallPolicyConfig"),
                                                 [t["name"] for t in described])  # fmt: skip
    for name, instead in NOT_YET.items():
        if document.get(name) not in (None, []):
            raise AgentError(f"{where}: {name}: not supported yet by agents-runner ({instead});"
                             " see docs/agents-exe.md")  # fmt: skip
    if "announce" in document and not isinstance(document["announce"], str):
        raise AgentError(f"{where}: announce: expected a string")
    if "systemPrompt" in document:
        if "system_prompt" in document:
            raise AgentError(f"{where}: systemPrompt: give `systemPrompt` or `system_prompt`")
        prompt = document["systemPrompt"]
        if isinstance(prompt, list) and all(isinstance(line, str) for line in prompt):
            prompt = "\n".join(prompt)
        if not isinstance(prompt, str):
            raise AgentError(f"{where}: systemPrompt: expected a string or a list of strings")
        out["system_prompt"] = prompt
    model_fields = [name for name in _AGENTS_EXE_MODEL_FIELDS if name in document]
    if not model_fields:
        return out
    if "provider" in document:
        raise AgentError(
            f"{where}: {model_fields[0]}: give the model as `provider` or as agents-exe's"
            " modelUrl/modelName, not both"
        )
    flavor = document.get("flavor", "OpenAIv1")
    if flavor not in _OPENAI_FLAVORS:
        raise AgentError(f"{where}: flavor: {flavor!r} is not supported; agents-runner speaks"
                         f" OpenAI's API: {', '.join(_OPENAI_FLAVORS)}")  # fmt: skip
    provider: dict[str, Any] = {"tag": "environment"}
    for field, key in (("modelUrl", "baseUrl"), ("modelName", "model"), ("apiKeyId", "apiKeyId")):
        if field in document:
            value = document[field]
            if not isinstance(value, str) or not value:
                raise AgentError(f"{where}: {field}: expected a non-empty string")
            provider[key] = value
    url = provider.get("baseUrl")
    if url is not None and not url.startswith(("http://", "https://")):
        raise AgentError(f"{where}: modelUrl: expected an http:// or https:// URL, got {url!r}")
    out["provider"] = provider
    return out


def _toolboxes(document: dict[str, Any], where: str) -> list[Any]:
    """`bashToolboxes`, and the legacy `toolDirectory` as a FileSystemDirectory entry."""
    toolboxes = document.get("bashToolboxes") or []
    if not isinstance(toolboxes, list):
        raise AgentError(f"{where}: bashToolboxes: expected a list")
    directory = document.get("toolDirectory")
    if directory is not None:
        if not isinstance(directory, str):
            raise AgentError(f"{where}: toolDirectory: expected a path")
        toolboxes = [*toolboxes, {"tag": "FileSystemDirectory", "contents": {"path": directory}}]
    return list(toolboxes)


def _sandboxed(policy: Any, tools: list[str]) -> Any:
    """The policy with each bash tool it runs in-process (by its default, runSync or
    runAsync, as agents-exe files have it) run in the bash-runner container instead."""
    if policy is not None and not isinstance(policy, dict):
        return policy  # the model's validation names what is wrong with it
    policy = dict(policy or {})
    default = policy.get("default") or {"tag": "runSync"}
    if not isinstance(default, dict) or default.get("tag") not in ("runSync", "runAsync"):
        return policy
    rules = list(policy.get("rules") or [])
    named = {r.get("tool") or (r.get("match") or {}).get("tool") for r in rules
             if isinstance(r, dict)}  # fmt: skip
    sandbox = {"tag": "runIsolated", "spec": {"tag": "docker", "image": BASH_RUNNER_IMAGE}}
    rules += [{"tool": t, "disposition": sandbox} for t in tools if t not in named]
    policy["rules"] = rules
    return policy


def _with_key(agent: Agent, keys: ApiKeys | None) -> Agent:
    """`agent` whose provider holds the value of its `apiKeyId` from `keys` (if any)."""
    provider = agent.provider
    if not isinstance(provider, EnvironmentProvider) or provider.api_key_id is None:
        return agent
    return agent.model_copy(update={"provider": provider.with_key(keys)})


def load_agent(path: str | Path, keys: ApiKeys | None = None) -> Agent:
    """Read, check and resolve an agent file (its scripted LLM script is read in; `keys`
    gives the value of agents-exe's `apiKeyId`)."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AgentError(f"cannot read agent file {path}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AgentError(f"agent file {path} is not valid JSON: {exc}") from None
    agent = parse_agent(document, f"agent file {path}", keys, _file=True)
    provider = agent.provider
    if isinstance(provider, ScriptedProvider) and provider.script and provider.responses is None:
        script_path = path.parent / provider.script
        try:
            script = json.loads(script_path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise AgentError(
                f"agent file {path}: provider.script: cannot read {script_path}: {exc.strerror}"
            ) from None
        except json.JSONDecodeError as exc:
            raise AgentError(f"script {script_path} is not valid JSON: {exc}") from None
        responses = script.get("responses") if isinstance(script, dict) else None
        if not isinstance(responses, list):
            raise AgentError(f'script {script_path}: expected {{"responses": [...]}}')
        document, _ = _unwrap(document, "")
        document = {**document, "provider": {**document["provider"], "responses": responses}}
        where = f"agent file {path} with its script {script_path}"
        agent = parse_agent(document, where, keys, _file=True)
    return agent
