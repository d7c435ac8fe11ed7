"""What an agent posted inline to `POST /v1/sessions` may ask of the server's host.

An agent file in the server's `--agents` directory is the operator's own; an agent
given in the request body came from the network. Unless `serve --trust-inline-agents`
says the network is trusted (a single-user setup), an inline agent may not:

- run a `localProcess` worker (a program on the server's host, as the server's user),
  nor give one an `env`;
- put a Docker call on a network (`network`, i.e. host networking or any named
  network), nor choose its egress's upstream network or private address ranges
  (`egress.network`, `egress.allowAddresses`): `egress.allow` through the call's own
  proxy stays allowed;
- name a server environment variable whose value is sent as an API key (`apiKeyEnv`);
- send model requests, and with them the server's key, to a `baseUrl` the server was
  not started with (`serve --allow-base-url URL`).

The check walks the parsed agent as a tree of models, so every place a disposition or
an isolation spec can sit (rules, default, decorate's inner, wrappers, and any later
one) is looked at; each refusal names its field path in the request body."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import BaseModel

from runner.server.problems import Problem
from runner.session import Agent, DockerSpec, LocalProcessSpec
from runner.session.agent import EnvironmentProvider, OpenAIProvider
from runner.session.policy import EgressSpec

#: What lifts every rule here (said in each refusal).
TRUST_OPTION = "serve --trust-inline-agents"


@dataclass(frozen=True)
class InlineRules:
    """How far the server trusts inline agents (`serve`'s options)."""

    #: `--trust-inline-agents`: no check at all.
    trusted: bool = False
    #: `--allow-base-url`: the provider endpoints an inline agent may use.
    base_urls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for url in self.base_urls:
            _origin_and_path(url)  # ValueError naming the URL

    def allows_url(self, url: str) -> bool:
        try:
            origin, path = _origin_and_path(url)
        except ValueError:
            return False
        for allowed in self.base_urls:
            allowed_origin, allowed_path = _origin_and_path(allowed)
            if origin == allowed_origin and (
                path == allowed_path or path.startswith(allowed_path.rstrip("/") + "/")
            ):
                return True
        return False


def _origin_and_path(url: str) -> tuple[tuple[str, str, int], str]:
    """(scheme, host, port) and the path without its trailing slash; ValueError for a
    URL that is not plain http(s) with a host (no user info, query or fragment)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL with a host")
    if parts.username is not None or parts.query or parts.fragment:
        raise ValueError(f"{url!r}: a base URL has no user info, query or fragment")
    port = parts.port or (443 if scheme == "https" else 80)
    return (scheme, parts.hostname.lower(), port), parts.path.rstrip("/") or "/"


def check_inline(agent: Agent, rules: InlineRules, where: str = "body.agent") -> None:
    """Refuse (403, naming the field) what an inline agent may not ask of the host."""
    if rules.trusted:
        return
    refusals = list(_refusals(agent, where, rules))
    if refusals:
        more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
        raise Problem(403, "inline_agent_refused", f"{refusals[0]}{more}")


def _refusals(node: object, path: str, rules: InlineRules) -> Iterator[str]:
    if isinstance(node, BaseModel):
        yield from _refusals_of_model(node, path, rules)
        for name, field in type(node).model_fields.items():
            yield from _refusals(getattr(node, name), f"{path}.{field.alias or name}", rules)
    elif isinstance(node, list | tuple):
        for index, item in enumerate(node):
            yield from _refusals(item, f"{path}[{index}]", rules)


def _refusals_of_model(node: BaseModel, path: str, rules: InlineRules) -> Iterator[str]:
    why = f"an agent posted inline may not do this ({TRUST_OPTION} lifts the rule)"
    if isinstance(node, LocalProcessSpec):
        command = " ".join(node.command)[:80]
        yield (f"{path}.tag: 'localProcess' runs {command!r} on the server's host as the"
               f" server's user; {why}, or use an agent file in the server's --agents"
               " directory")  # fmt: skip
        if node.env:
            yield f"{path}.env: sets the environment of a program on the server's host; {why}"
    elif isinstance(node, DockerSpec) and node.network not in (None, "none"):
        yield (f"{path}.network: {node.network[:80]!r} puts the container on a network of"
               f" the server's host; {why} (use `egress` with an allow-list)")  # fmt: skip
    elif isinstance(node, EgressSpec):
        if node.network is not None:
            yield (f"{path}.network: chooses the network the egress proxy reaches out"
                   f" through; {why} (the server's AGENTS_RUNNER_EGRESS_NETWORK is"
                   " used)")  # fmt: skip
        if node.allow_addresses:
            yield (f"{path}.allowAddresses: lets the container reach private addresses;"
                   f" {why}")  # fmt: skip
    elif isinstance(node, OpenAIProvider):
        if node.api_key_env is not None:
            yield (f"{path}.apiKeyEnv: would send the server's environment variable"
                   f" {node.api_key_env[:80]!r} as an API key; {why}")  # fmt: skip
        yield from _url_refusal(node.base_url, f"{path}.baseUrl", rules)
    elif isinstance(node, EnvironmentProvider) and node.base_url is not None:
        yield from _url_refusal(node.base_url, f"{path}.baseUrl", rules)


def _url_refusal(url: str, path: str, rules: InlineRules) -> Iterator[str]:
    if rules.allows_url(url):
        return
    listed = ", ".join(rules.base_urls) if rules.base_urls else "none"
    yield (f"{path}: {url[:120]!r} is not a model endpoint this server was started with"
           f" (serve --allow-base-url URL; allowed: {listed}): the server sends model"
           " requests, and its API key, only where its operator said")  # fmt: skip
