"""What a front door decides for every agent it runs, given explicitly: the library reads
no environment variable (the commands read theirs in runner/cli/settings.py).

`lease_s`: how long a session's lease lasts unrenewed; `audit`: where each isolated
call's record goes (runner.session.audit); `egress_network`: the Docker network an egress
proxy goes out through when the spec's `egress` names none (None: such a call fails to
start, saying so; a network is never guessed); `api_keys`: the values of the key ids
agents-exe's agent files name (`apiKeyId`), for the agent files it reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runner.llm.keys import ApiKeys
from runner.session.audit import AuditSetting
from runner.session.policy import DockerSpec, LocalProcessSpec

#: Seconds a lease lasts unless renewed (the commands read AGENTS_RUNNER_LEASE_SECONDS).
DEFAULT_LEASE_SECONDS = 30.0


@dataclass(frozen=True)
class AgentSettings:
    lease_s: float = DEFAULT_LEASE_SECONDS
    audit: AuditSetting = field(default_factory=AuditSetting)
    egress_network: str | None = None
    api_keys: ApiKeys | None = field(default=None, repr=False)


def with_egress_network(
    spec: DockerSpec | LocalProcessSpec, network: str | None
) -> DockerSpec | LocalProcessSpec:
    """`spec` with its egress proxy going out through `network` when it names none."""
    if network is None or not isinstance(spec, DockerSpec) or spec.egress is None:
        return spec
    if spec.egress.network is not None:
        return spec
    return spec.model_copy(update={"egress": spec.egress.model_copy(update={"network": network})})


__all__ = ["DEFAULT_LEASE_SECONDS", "AgentSettings", "with_egress_network"]
