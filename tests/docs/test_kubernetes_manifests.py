"""deploy/kubernetes/ holds valid Kubernetes objects that keep the sandbox's promises.

Every manifest is validated offline against the Kubernetes API's JSON schemas
(kubernetes-validate, strict: an unknown or misspelt field is an error), and its security
properties are checked: every container non-root with a read-only root, all
capabilities dropped, no privilege escalation, a seccomp profile, limits, no
service-account token; call Pods sandboxed by gVisor and denied all traffic; workers
reaching only PostgreSQL, DNS and the model. None of this has run on a cluster.

Each checker returns the problems it finds, and a test feeds it a broken copy to show it
finds them: a check that could not fail would prove nothing.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from runner.llm.config import OpenAIProvider
from runner.session.policy import DockerSpec
from runner.session.scheduler import DEFAULT_LEASE_SECONDS

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "kubernetes"
#: The oldest release still common in managed offerings, and the newest the package ships.
VERSIONS = ("1.31", "1.37")
#: Files that describe the Kubernetes runner (not applied today) say so in their header.
DESIGN_MARK = "# DESIGN"
NOT_KUBERNETES = {"kustomization.yaml"}  # kustomize's own file: no API schema

Doc = dict[str, Any]


def manifest_files() -> list[Path]:
    return sorted(p for p in DEPLOY.glob("*.yaml") if p.name not in NOT_KUBERNETES)


def documents(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def all_documents() -> list[tuple[str, Doc]]:
    return [(p.name, d) for p in manifest_files() for d in documents(p)]


def one(kind: str, name: str | None = None) -> Doc:
    found = [d for _, d in all_documents()
             if d["kind"] == kind and name in (None, d["metadata"]["name"])]  # fmt: skip
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_specs(doc: Doc) -> Iterator[tuple[Doc, Doc]]:
    """(metadata, pod spec) of a Pod, or of the Pod template of a workload."""
    if doc["kind"] == "Pod":
        yield doc["metadata"], doc["spec"]
    elif doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        template = doc["spec"]["template"]
        metadata = {**template["metadata"], "namespace": doc["metadata"].get("namespace")}
        yield metadata, template["spec"]


def all_pod_specs() -> list[tuple[str, Doc, Doc]]:
    return [(f"{f}:{d['kind']}/{d['metadata']['name']}", m, s)
            for f, d in all_documents() for m, s in pod_specs(d)]  # fmt: skip


def selects(selector: Doc, labels: dict[str, str]) -> bool:
    """Whether a label selector matches `labels` (matchLabels and matchExpressions)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values", [])
        if not {"In": key in labels and labels[key] in values,
                "NotIn": labels.get(key) not in values,
                "Exists": key in labels,
                "DoesNotExist": key not in labels}[operator]:  # fmt: skip
            return False
    return True


# --- checkers: each returns what is wrong, empty when nothing is ---------------------


def container_problems(spec: Doc) -> list[str]:
    """A container must be non-root, read-only, capability-less, unable to escalate,
    under a seccomp profile, with CPU and memory requests and limits."""
    problems = []
    pod_context = spec.get("securityContext", {})
    for container in spec.get("initContainers", []) + spec["containers"]:
        ctx, name = container.get("securityContext", {}), container["name"]

        def effective(key: str, ctx: Doc = ctx) -> Any:
            return ctx.get(key, pod_context.get(key))

        if effective("runAsNonRoot") is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        if effective("runAsUser") in (None, 0):
            problems.append(f"{name}: no non-zero runAsUser")
        if ctx.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{name}: the root filesystem is writable")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if ctx.get("privileged", False):
            problems.append(f"{name}: privileged")
        capabilities = ctx.get("capabilities", {})
        if capabilities.get("drop") != ["ALL"] or capabilities.get("add"):
            problems.append(f"{name}: capabilities are not exactly drop ALL, add none")
        if (effective("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: no seccomp profile (RuntimeDefault or Localhost)")
        resources = container.get("resources", {})
        for part in ("requests", "limits"):
            missing = {"cpu", "memory"} - set(resources.get(part, {}))
            if missing:
                problems.append(f"{name}: no {part} for {', '.join(sorted(missing))}")
    return problems


def pod_problems(spec: Doc) -> list[str]:
    """A Pod gets no service-account token and shares nothing with its host."""
    problems = []
    if spec.get("automountServiceAccountToken") is not False:
        problems.append("automountServiceAccountToken is not false")
    for volume in spec.get("volumes", []):
        if "hostPath" in volume:
            problems.append(f"volume {volume['name']} mounts a host path")
        for source in volume.get("projected", {}).get("sources", []):
            if "serviceAccountToken" in source:
                problems.append(f"volume {volume['name']} projects a service-account token")
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            problems.append(f"{key} is true")
    if spec.get("enableServiceLinks", True):
        problems.append("enableServiceLinks is not false (Service addresses in the environment)")
    return problems


def policies_selecting(metadata: Doc) -> list[Doc]:
    return [d for _, d in all_documents() if d["kind"] == "NetworkPolicy"
            and d["metadata"].get("namespace") == metadata.get("namespace")
            and selects(d["spec"]["podSelector"], metadata.get("labels", {}))]  # fmt: skip


def allowed(policies: list[Doc], direction: str) -> list[Doc] | None:
    """The rules that let traffic through in `direction` ("Ingress" or "Egress"), the
    union over the policies (as Kubernetes reads them); None: no policy isolates the
    Pod that way, so everything is allowed."""
    isolating = [p for p in policies if direction in p["spec"].get("policyTypes", ["Ingress"])]
    if not isolating:
        return None
    return [rule for p in isolating for rule in p["spec"].get(direction.lower(), None) or []]


def worker_egress_problems(rules: list[Doc] | None) -> list[str]:
    """Every egress rule names its destination and ports, and the ports are PostgreSQL,
    DNS and HTTPS (the model's endpoint)."""
    if rules is None:
        return ["no NetworkPolicy restricts the workers' egress"]
    expected = {("TCP", 5432), ("UDP", 53), ("TCP", 53), ("TCP", 443)}
    problems = []
    for rule in rules:
        if not rule.get("to"):
            problems.append(f"an egress rule allows every destination: {rule}")
        ports = {(p.get("protocol", "TCP"), p.get("port")) for p in rule.get("ports", [])}
        if not ports or ports - expected:
            problems.append(f"an egress rule opens ports beyond {sorted(expected)}: {rule}")
        for peer in rule.get("to", []):
            if peer.get("ipBlock", {}).get("cidr", "").endswith("/0"):
                problems.append(f"an egress rule allows the whole internet: {peer}")
    return problems


# --- the schemas -----------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: p.name)
def test_every_manifest_matches_the_kubernetes_api_schema(path: Path, version: str) -> None:
    docs = documents(path)
    assert docs, f"{path.name} holds no object"
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_strict_validation_refuses_a_misspelt_field() -> None:
    pod = copy.deepcopy(one("Pod"))
    context = pod["spec"]["containers"][0]["securityContext"]
    context["readOnlyRootFileSystem"] = context.pop("readOnlyRootFilesystem")
    with pytest.raises(kubernetes_validate.ValidationError, match="readOnlyRootFileSystem"):
        kubernetes_validate.validate(pod, VERSIONS[-1], strict=True)


def test_the_manifests_are_the_ones_on_disk() -> None:
    names = {p.name for p in manifest_files()}
    expected = {"namespace.yaml", "secret.template.yaml", "worker-deployment.yaml",
                "worker-pdb.yaml", "worker-networkpolicy.yaml", "isolated-call-pod.yaml",
                "isolated-call-networkpolicy.yaml", "runtimeclass-gvisor.yaml"}  # fmt: skip
    assert expected <= names


# --- every Pod --------------------------------------------------------------------------


def test_every_container_is_non_root_read_only_and_drops_every_capability() -> None:
    specs = all_pod_specs()
    assert {where.split(":")[1] for where, _, _ in specs} >= {
        "Deployment/agents-runner-worker", "Pod/call-example"}  # fmt: skip
    for where, _, spec in specs:
        assert container_problems(spec) == [], where


def test_no_pod_gets_a_service_account_token_or_a_piece_of_its_host() -> None:
    for where, _, spec in all_pod_specs():
        assert pod_problems(spec) == [], where
    for _, doc in all_documents():
        if doc["kind"] == "ServiceAccount":
            assert doc.get("automountServiceAccountToken") is False, doc["metadata"]["name"]


@pytest.mark.parametrize(
    ("where", "change", "problem"),
    [
        ("securityContext", lambda c: c.pop("readOnlyRootFilesystem"), "writable"),
        ("securityContext", lambda c: c.update(capabilities={"drop": ["NET_RAW"]}), "drop ALL"),
        ("securityContext", lambda c: c["capabilities"].update(add=["SYS_ADMIN"]), "drop ALL"),
        ("securityContext", lambda c: c.update(allowPrivilegeEscalation=True), "Escalation"),
        ("securityContext", lambda c: c.update(runAsUser=0), "runAsUser"),
        ("securityContext", lambda c: c.update(seccompProfile={"type": "Unconfined"}), "seccomp"),
        ("resources", lambda r: r.pop("limits"), "no limits"),
    ],
)
def test_the_container_checks_find_a_weakened_container(
    where: str, change: Any, problem: str
) -> None:
    spec = copy.deepcopy(one("Pod")["spec"])
    change(spec["containers"][0][where])
    assert any(problem in p for p in container_problems(spec)), container_problems(spec)


TOKEN_VOLUME = {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda s: s.pop("automountServiceAccountToken"), "automountServiceAccountToken"),
        (lambda s: s.update(hostNetwork=True), "hostNetwork"),
        (lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "host path"),
        (lambda s: s["volumes"].append(TOKEN_VOLUME), "service-account token"),
    ],
)
def test_the_pod_checks_find_a_token_or_a_host_share(change: Any, problem: str) -> None:
    spec = copy.deepcopy(one("Pod")["spec"])
    change(spec)
    assert any(problem in p for p in pod_problems(spec)), pod_problems(spec)


def test_both_namespaces_enforce_the_restricted_pod_security_standard() -> None:
    namespaces = {d["metadata"]["name"]: d for _, d in all_documents() if d["kind"] == "Namespace"}
    assert set(namespaces) == {"agents-runner", "agents-runner-calls"}
    for name, ns in namespaces.items():
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted", name
    for file, doc in all_documents():
        if doc["kind"] not in ("Namespace", "RuntimeClass"):  # the cluster-scoped ones
            assert doc["metadata"].get("namespace") in namespaces, f"{file}: {doc['kind']}"


# --- the workers ------------------------------------------------------------------------


def worker_deployment() -> Doc:
    return one("Deployment", "agents-runner-worker")


def test_workers_run_the_worker_command_with_the_store_from_the_secret() -> None:
    (container,) = worker_deployment()["spec"]["template"]["spec"]["containers"]
    command = container["command"] + container.get("args", [])
    assert command[0].endswith("/agents-runner") and command[1] == "worker"
    # The URL holds the password: it comes through the environment, never argv.
    assert "--store" not in command and not any("postgresql://" in a for a in command)
    env = {e["name"]: e for e in container["env"]}
    secret = one("Secret", "agents-runner-store")
    ref = env["AGENTS_RUNNER_STORE"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    # Every option the manifest passes is one the real CLI has.
    help_text = subprocess.run([sys.executable, "-m", "runner.cli", "worker", "--help"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
    for option in (a for a in command[2:] if a.startswith("--")):
        assert option in help_text, option


def test_the_worker_image_user_is_the_manifests_user() -> None:
    for image_dir, spec in (("worker", worker_deployment()["spec"]["template"]["spec"]),
                            ("bash-runner", one("Pod")["spec"])):  # fmt: skip
        dockerfile = (REPO / "images" / image_dir / "Dockerfile").read_text()
        (user,) = re.findall(r"^USER (\d+):(\d+)$", dockerfile, re.M)
        context = spec["securityContext"]
        assert (str(context["runAsUser"]), str(context["runAsGroup"])) == user, image_dir


def test_a_sigterm_drain_fits_the_grace_period() -> None:
    spec = worker_deployment()["spec"]["template"]["spec"]
    # SIGTERM drains: a preStop hook would only delay it.
    assert all("preStop" not in c.get("lifecycle", {}) for c in spec["containers"])
    tool_s = DockerSpec.model_fields["timeout_seconds"].default
    model_s = OpenAIProvider.model_fields["timeout_seconds"].default
    (container,) = spec["containers"]
    lease_s = float({e["name"]: e.get("value") for e in container["env"]}.get(
        "AGENTS_RUNNER_LEASE_SECONDS") or DEFAULT_LEASE_SECONDS)  # fmt: skip
    # One step (a model call and a batch of tool calls) and a lease renewal, twice over.
    assert spec["terminationGracePeriodSeconds"] >= 2 * (tool_s + model_s + lease_s)


def test_the_disruption_budget_covers_the_workers_and_leaves_some_running() -> None:
    deployment, pdb = worker_deployment(), one("PodDisruptionBudget")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(pdb["spec"]["selector"], labels)
    assert selects(deployment["spec"]["selector"], labels)
    assert 0 < pdb["spec"]["maxUnavailable"] < deployment["spec"]["replicas"]


def test_workers_accept_nothing_and_reach_only_postgresql_dns_and_the_model() -> None:
    template = worker_deployment()["spec"]["template"]
    metadata = {**template["metadata"], "namespace": "agents-runner"}
    policies = policies_selecting(metadata)
    assert allowed(policies, "Ingress") == []
    egress = allowed(policies, "Egress")
    assert worker_egress_problems(egress) == []
    assert any(p.get("port") == 5432 for rule in egress or [] for p in rule["ports"])


def test_the_worker_egress_check_finds_an_open_rule() -> None:
    assert worker_egress_problems(None)
    assert worker_egress_problems([{"ports": [{"port": 5432}]}])  # any destination
    assert worker_egress_problems([{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}],
                                    "ports": [{"port": 443}]}])  # fmt: skip
    assert worker_egress_problems([{"to": [{"podSelector": {}}], "ports": [{"port": 22}]}])


def test_the_secret_is_a_template_without_a_password() -> None:
    secret = one("Secret", "agents-runner-store")
    url = urlsplit(secret["stringData"]["AGENTS_RUNNER_STORE"])
    assert url.scheme == "postgresql" and url.password == "CHANGE-ME"
    assert "TEMPLATE" in (DEPLOY / "secret.template.yaml").read_text().splitlines()[0]


# --- the Kubernetes runner's call Pods (design) ----------------------------------------


def test_a_call_pod_is_a_one_shot_gvisor_sandbox_with_a_bounded_tmp() -> None:
    pod, runtime_class = one("Pod"), one("RuntimeClass")
    spec = pod["spec"]
    assert spec["runtimeClassName"] == runtime_class["metadata"]["name"] == "gvisor"
    assert runtime_class["handler"] == "runsc"
    assert spec["restartPolicy"] == "Never"
    # The runner deletes the Pod at the call's deadline; the cluster's backstop is later.
    assert spec["activeDeadlineSeconds"] > DockerSpec.model_fields["timeout_seconds"].default
    (container,) = spec["containers"]
    assert container["stdin"] and container["stdinOnce"] and not container.get("tty")
    assert container["resources"]["requests"] == container["resources"]["limits"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert volumes[tmp["name"]]["emptyDir"]["sizeLimit"]
    assert all(v["emptyDir"].get("sizeLimit") for v in spec["volumes"])


def test_call_pods_are_denied_all_egress_and_ingress() -> None:
    pod = one("Pod")
    policies = policies_selecting(pod["metadata"])
    assert policies, "no NetworkPolicy selects the call Pods"
    assert allowed(policies, "Egress") == []
    assert allowed(policies, "Ingress") == []
    # The deny-all policy picks every Pod of the namespace, labelled or not.
    assert any(p["spec"]["podSelector"] == {} for p in policies)


def test_the_policy_check_sees_an_egress_rule_added_to_the_call_pods() -> None:
    pod = one("Pod")
    opened = copy.deepcopy(policies_selecting(pod["metadata"]))
    opened[0]["spec"]["egress"] = [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]
    assert allowed(opened, "Egress") != []
    assert allowed([], "Egress") is None  # no policy at all: nothing is denied


# --- kustomize ---------------------------------------------------------------------------


def test_kustomize_applies_the_workers_and_leaves_the_design_and_the_template_out() -> None:
    listed = set(yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"])
    on_disk = {p.name for p in manifest_files()}
    assert listed <= on_disk
    for name in on_disk:
        text = (DEPLOY / name).read_text()
        left_out = text.startswith(DESIGN_MARK) or name == "secret.template.yaml"
        assert (name not in listed) == left_out, name


# --- docs/scale-out.md --------------------------------------------------------------------


def test_the_scale_out_doc_names_every_manifest_and_says_it_never_ran_on_a_cluster() -> None:
    doc = (REPO / "docs" / "scale-out.md").read_text()
    for path in sorted(DEPLOY.glob("*.yaml")):
        assert f"`{path.name}`" in doc, path.name
    assert "**They have not run on a cluster" in doc
    assert f"for {' and '.join(VERSIONS)}" in doc  # the versions validated against
