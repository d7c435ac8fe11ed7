"""`egress` on a docker spec, and through a policy rule: the allow-list reaches the
container's limits, and a bad entry is a clear validation error where it stands."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runner.isolation import EgressPolicy
from runner.llm.base import RequestedCall
from runner.session import PolicyConfig, PolicyContext
from runner.session.execute import container_limits, runner_for_spec
from runner.session.policy import DockerSpec, unwrap

SPEC = {"tag": "docker", "image": "agents-runner/bash-runner:latest",
        "egress": {"allow": ["packages.example.test:443", "*.corp.example:443"],
                   "network": "corp-egress", "allowAddresses": ["10.20.0.0/16"]}}  # fmt: skip


def test_a_docker_spec_with_egress_gives_its_container_the_policy():
    spec = DockerSpec.model_validate(SPEC)
    assert container_limits(spec).egress == EgressPolicy(
        ("packages.example.test:443", "*.corp.example:443"),
        upstream_network="corp-egress", allow_addresses=("10.20.0.0/16",),
    )  # fmt: skip
    assert container_limits(spec).network == "none"
    runner = runner_for_spec(spec)
    assert runner.limits.egress is not None  # type: ignore[attr-defined]
    assert container_limits(DockerSpec.model_validate({**SPEC, "egress": None})).egress is None


def test_a_policy_rule_can_open_egress_for_one_tool():
    config = PolicyConfig.model_validate({
        "default": {"tag": "runAsync"},
        "rules": [{"match": {"tool": "pip"},
                   "disposition": {"tag": "runIsolated", "spec": SPEC}}],
    })  # fmt: skip
    disposition = config(PolicyContext("s", "a", 0), RequestedCall("c", "pip", {}))
    _, base = unwrap(disposition)
    assert container_limits(base.spec).egress.allow[0] == "packages.example.test:443"  # type: ignore[union-attr, arg-type]


@pytest.mark.parametrize(
    ("egress", "says"),
    [
        ({"allow": ["nope"]}, "EgressPolicy.allow[0]: 'nope' is not HOST:PORT"),
        ({"allow": []}, "at least 1 item"),
        ({"allow": ["a.test:80"], "network": "host"}, "upstream_network"),
        ({"allow": ["a.test:80"], "allowAddresses": ["x"]}, "allow_addresses[0]"),
        ({"allow": ["a.test:80"], "proxy": "x"}, "Extra inputs are not permitted"),
        ({"allow": ["a.test:80"], "tlsPorts": [0]}, "tls_ports[0]"),
    ],
)
def test_bad_egress_is_a_validation_error_naming_it(egress, says):
    with pytest.raises(ValidationError) as raised:
        DockerSpec.model_validate({**SPEC, "egress": egress})
    assert says in str(raised.value)
    assert "egress" in str(raised.value)


def test_network_and_egress_exclude_each_other():
    with pytest.raises(ValidationError, match="`network` or `egress`, not both"):
        DockerSpec.model_validate({**SPEC, "network": "bridge"})


def test_tls_ports_reach_the_policy():
    spec = DockerSpec.model_validate({**SPEC, "egress": {**SPEC["egress"], "tlsPorts": [8443]}})
    assert container_limits(spec).egress.tls_ports == (8443,)  # type: ignore[union-attr]
    assert container_limits(DockerSpec.model_validate(SPEC)).egress.tls_ports == (443,)  # type: ignore[union-attr]
