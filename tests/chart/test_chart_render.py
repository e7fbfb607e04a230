"""`helm lint` and `helm template` of charts/gpuplane: defaults, every ci/ values file,
contradictory values refused by the validation template, wrong types refused by the schema."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_kit import (
    BAD_VALUES,
    CHART,
    CI_VALUES,
    MONITORING_API,
    SERVICES,
    Helm,
    container,
    find,
    one,
    plain_env,
)

WORKLOADS = {
    "controller": "Deployment",
    "hypervisor": "DaemonSet",
    "gpuctl": "Deployment",
    "lens": "Deployment",
}


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def test_ci_values_exist() -> None:
    # Every non-default shape the chart claims to support is rendered below.
    assert {p.stem for p in CI_VALUES} >= {"ha-values", "monitoring-values", "simulated-values"}


def test_lint_default(helm: Helm) -> None:
    r = helm.run("lint", "--strict", str(CHART))
    assert r.rc == 0, r.stdout + r.stderr
    assert "0 chart(s) failed" in r.stdout


@pytest.mark.parametrize("values", CI_VALUES, ids=_ids(CI_VALUES))
def test_lint_ci_values(helm: Helm, values: Path) -> None:
    r = helm.run("lint", "--strict", str(CHART), "-f", str(values))
    assert r.rc == 0, r.stdout + r.stderr


def test_samples_are_not_part_of_the_chart(helm: Helm, tmp_path: Path) -> None:
    r = helm.run("package", str(CHART), "--destination", str(tmp_path))
    assert r.rc == 0, r.stderr
    (pkg,) = tmp_path.glob("gpuplane-*.tgz")
    listing = subprocess.run(["tar", "tzf", str(pkg)], capture_output=True, text=True, check=True).stdout
    assert "gpuplane/crds/gpus.yaml" in listing
    assert "crd-samples" not in listing


def test_default_render(helm: Helm) -> None:
    docs = helm.render()
    for component, kind in WORKLOADS.items():
        one(docs, kind, component)
        one(docs, "ServiceAccount", component)
    # CRDs come from crds/ (installed by `helm install`, not templated)
    assert not find(docs, "CustomResourceDefinition")
    crds = [d for d in helm.render(include_crds=True) if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == len(list((CHART / "crds").glob("*.yaml")))
    # monitoring is off by default
    assert not find(docs, "ServiceMonitor")


def test_controller_deployment(helm: Helm) -> None:
    docs = helm.render()
    dep = one(docs, "Deployment", "controller")
    assert dep["spec"]["replicas"] == 2
    c = container(dep)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": 8080, "grpc": 9090}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    env = plain_env(c)
    assert env["GPUPLANE_CONTROLLER_LEADER_ELECT"] == "true"
    assert env["GPUPLANE_CONTROLLER_LEASE_NAME"] == "gpuplane-controller-leader"
    assert env["POD_NAME"] == "from-metadata.name"
    svc = one(docs, "Service", "controller")
    assert svc["spec"]["type"] == "ClusterIP"
    assert {p["port"] for p in svc["spec"]["ports"]} == {8080, 9090}
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_hypervisor_daemonset(helm: Helm) -> None:
    docs = helm.render()
    ds = one(docs, "DaemonSet", "hypervisor")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["hostPID"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "nvidia.com/gpu.present"
    c = container(ds)
    node_name = next(e for e in c["env"] if e["name"] == "NODE_NAME")
    assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    env = plain_env(c)
    assert env["GPUPLANE_HYPERVISOR_HTTP_PORT"] == "8001"
    assert env["GPUPLANE_HYPERVISOR_CONTROLLER"] == "gp-gpuplane-controller.gpuplane-system.svc:9090"
    assert c["ports"][0]["hostPort"] == 8001
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/usr/local/nvidia/lib64", "/dev", "/var/lib/gpuplane/hypervisor"} <= mounts


def test_hypervisor_port_from_component_config(helm: Helm) -> None:
    docs = helm.render(sets=("componentConfig.hypervisor.portNumber=8123",))
    c = container(one(docs, "DaemonSet", "hypervisor"))
    assert c["ports"][0]["containerPort"] == c["ports"][0]["hostPort"] == 8123
    assert plain_env(c)["GPUPLANE_HYPERVISOR_HTTP_PORT"] == "8123"
    assert c["readinessProbe"]["httpGet"]["port"] == 8123


def test_gpuctl_and_lens(helm: Helm) -> None:
    docs = helm.render()
    assert one(docs, "Service", "gpuctl")["spec"]["ports"][0]["port"] == 8000
    assert one(docs, "Service", "lens")["spec"]["ports"][0]["port"] == 8090
    assert plain_env(container(one(docs, "Deployment", "gpuctl")))["GPUPLANE_GPUCTL_CONTROLLER_ADDRESS"] == (
        "gp-gpuplane-controller.gpuplane-system.svc:9090"
    )
    pvc = one(docs, "PersistentVolumeClaim", "lens")
    lens = one(docs, "Deployment", "lens")
    vols = {v["name"]: v for v in lens["spec"]["template"]["spec"]["volumes"]}
    assert vols["data"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    # one SQLite writer: never two pods during a rollout
    assert lens["spec"]["strategy"]["type"] == "Recreate"


def test_image_per_service(helm: Helm) -> None:
    docs = helm.render(sets=("image.tag=dev", "lens.image.tag=1.2.3"))
    images = {comp: container(one(docs, kind, comp))["image"] for comp, kind in WORKLOADS.items()}
    assert images == {
        "controller": "ghcr.io/gpuplane/controller:dev",
        "hypervisor": "ghcr.io/gpuplane/hypervisor:dev",
        "gpuctl": "ghcr.io/gpuplane/gpuctl:dev",
        "lens": "ghcr.io/gpuplane/lens:1.2.3",
    }
    for comp, kind in WORKLOADS.items():
        assert container(one(docs, kind, comp))["command"] == [SERVICES[comp][2]]


def test_network_policies(helm: Helm) -> None:
    docs = helm.render()
    pol = one(docs, "NetworkPolicy", "controller")
    rules = {r["ports"][0]["port"]: r["from"] for r in pol["spec"]["ingress"]}
    # the diagnostic HTTP port admits only this release's pods
    assert rules["http"] == [
        {
            "podSelector": {
                "matchLabels": {"app.kubernetes.io/name": "gpuplane", "app.kubernetes.io/instance": "gp"}
            }
        }
    ]
    for comp in ("gpuctl", "lens"):
        ingress = one(docs, "NetworkPolicy", comp)["spec"]["ingress"]
        assert [p["port"] for r in ingress for p in r["ports"]] == ["http"]
    assert not find(helm.render(sets=("networkPolicy.enabled=false",)), "NetworkPolicy")


def test_service_monitors_need_the_api(helm: Helm) -> None:
    mon = next(p for p in CI_VALUES if p.stem == "monitoring-values")
    assert not find(helm.render(mon), "ServiceMonitor")
    docs = helm.render(mon, api_versions=(MONITORING_API,))
    assert {
        d["metadata"]["labels"]["app.kubernetes.io/component"] for d in find(docs, "ServiceMonitor")
    } == set(WORKLOADS)
    # the hostNetwork hypervisor gets a headless Service only for scraping
    assert one(docs, "Service", "hypervisor")["spec"]["clusterIP"] == "None"


@pytest.mark.parametrize("values", CI_VALUES, ids=_ids(CI_VALUES))
def test_ci_values_render(helm: Helm, values: Path) -> None:
    docs = helm.render(values, api_versions=(MONITORING_API,))
    assert docs
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(names) == len(set(names)), "duplicate objects"


def test_ha_values(helm: Helm) -> None:
    docs = helm.render(CHART / "ci" / "ha-values.yaml")
    assert one(docs, "Deployment", "controller")["spec"]["replicas"] == 3
    lens = one(docs, "Deployment", "lens")
    assert lens["spec"]["replicas"] == 2 and "strategy" not in lens["spec"]
    env = {e["name"]: e for e in container(lens)["env"]}
    assert env["GPUPLANE_LENS_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "lens-postgres",
        "key": "database-url",
    }
    assert not find(docs, "PersistentVolumeClaim")


def test_simulated_values(helm: Helm) -> None:
    docs = helm.render(CHART / "ci" / "simulated-values.yaml")
    env = plain_env(container(one(docs, "DaemonSet", "hypervisor")))
    assert env["GPUPLANE_HYPERVISOR_BACKEND"] == "simulated"
    assert env["GPUPLANE_HYPERVISOR_SIMULATED_DEVICES"] == "8xH100-80GB"
    assert env["GPUPLANE_HYPERVISOR_HTTP_PORT"] == "8101"
    assert (
        plain_env(container(one(docs, "Deployment", "controller")))["GPUPLANE_CONTROLLER_LEADER_ELECT"]
        == "false"
    )


CONTRADICTIONS = {
    "contradictory-replicas-without-leader-election": (
        "controller.replicas > 1 needs controller.leaderElection.enabled=true"
    ),
    "contradictory-simulated-without-devices": (
        "hypervisor.backend=simulated needs hypervisor.simulatedDevices"
    ),
    "contradictory-lens-replicas-on-sqlite": "lens.replicas > 1 needs lens.database.existingSecret",
    "contradictory-hypervisor-without-controller": (
        "hypervisor.enabled without controller.enabled needs hypervisor.controllerAddress"
    ),
    "contradictory-devices-without-simulated-backend": (
        "hypervisor.simulatedDevices is set but hypervisor.backend is not simulated"
    ),
    "contradictory-lens-replicas-without-shared-keys": (
        "lens.replicas > 1 needs lens.encryptionKeys.existingSecret"
    ),
}


SCHEMA_VIOLATIONS = {
    "wrong-type-replicas": "at '/controller/replicas': got string, want integer",
    "unknown-key": "at '/controller': additional properties 'replica' not allowed",
    "controller-exposed": "at '/controller/service': additional properties 'type' not allowed",
}


def test_every_bad_values_file_is_checked() -> None:
    assert {p.stem for p in BAD_VALUES.glob("*.yaml")} == set(CONTRADICTIONS) | set(SCHEMA_VIOLATIONS)


@pytest.mark.parametrize("name", sorted(CONTRADICTIONS))
def test_contradictory_values_fail(helm: Helm, name: str) -> None:
    r = helm.template(BAD_VALUES / f"{name}.yaml")
    assert r.rc != 0
    assert CONTRADICTIONS[name] in r.stderr, r.stderr


@pytest.mark.parametrize(("name", "message"), sorted(SCHEMA_VIOLATIONS.items()))
def test_schema_rejects(helm: Helm, name: str, message: str) -> None:
    r = helm.template(BAD_VALUES / f"{name}.yaml")
    assert r.rc != 0
    assert "values don't meet the specifications of the schema" in r.stderr, r.stderr
    assert message in r.stderr


def test_schema_rejects_bad_port(helm: Helm) -> None:
    r = helm.template(sets=("componentConfig.hypervisor.portNumber=70000",))
    assert r.rc != 0 and "at '/componentConfig/hypervisor/portNumber': maximum" in r.stderr


def test_schema_is_valid_json_schema() -> None:
    from jsonschema import Draft7Validator

    schema = json.loads((CHART / "values.schema.json").read_text())
    Draft7Validator.check_schema(schema)


# --- env names match each service's Settings -------------------------------------------------

# Variables a service reads outside its prefix (documented in its settings/components).
_OUTSIDE_PREFIX = {
    "NODE_NAME",
    "POD_NAME",
    "POD_NAMESPACE",
    "LD_LIBRARY_PATH",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
}


# Runs in a clean child process: each service's real Settings built from exactly the env
# its container gets (os.environ replaced per service), answered as JSON.
_DUMP = """
import importlib, json, os, sys
out = {}
for component, (module, env) in json.load(sys.stdin).items():
    os.environ.clear()
    os.environ.update(env)
    out[component] = json.loads(importlib.import_module(module).Settings().model_dump_json())
print(json.dumps(out))
"""


def _settings_dumps(envs: dict[str, dict[str, str]]) -> dict[str, dict[str, Any]]:
    job = {c: (SERVICES[c][1], env) for c, env in envs.items()}
    p = subprocess.run(
        [sys.executable, "-c", _DUMP],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert p.returncode == 0, f"a service's Settings refuse the chart's env:\n{p.stderr[-2000:]}"
    return dict(json.loads(p.stdout))


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=["default", *_ids(CI_VALUES)])
def test_env_matches_settings(helm: Helm, values: Path | None) -> None:
    docs = helm.render(*([values] if values else []))
    fields = {
        "metadata.name": "pod-0",
        "metadata.namespace": "gpuplane-system",
        "spec.nodeName": "gpu-node-0",
    }
    envs = {c: plain_env(container(one(docs, kind, c)), fields) for c, kind in WORKLOADS.items()}
    dumps = _settings_dumps(envs)
    for component, env in envs.items():
        prefix = SERVICES[component][0]
        dump = dumps[component]
        for name, value in env.items():
            if name in _OUTSIDE_PREFIX:
                continue
            assert name.startswith(prefix), f"{component}: {name} is not read by the service"
            field = name[len(prefix) :].lower()
            assert field in dump, f"{component}: {name} matches no Settings field"
            if isinstance(dump[field], (str, int, float)) and not isinstance(dump[field], bool):
                assert str(dump[field]) == value, f"{component}: {name}={value!r} read as {dump[field]!r}"
        if component == "hypervisor":
            assert dump["node_name"] == "gpu-node-0"  # NODE_NAME from spec.nodeName


# --- docs ---------------------------------------------------------------------------------------

_COMMON_KNOBS = {"resources", "nodeSelector", "tolerations", "affinity", "podAnnotations", "extraEnv"}


def _leaves(node: Any, path: str = "") -> list[str]:
    if isinstance(node, dict) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, f"{path}.{k}" if path else k)]
    return [path]


def test_readme_documents_every_value() -> None:
    text = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = []
    for leaf in _leaves(values):
        parts = leaf.split(".")
        prefixes = [".".join(parts[: i + 1]) for i in range(len(parts))]
        parent, last = leaf.rsplit(".", 1) if "." in leaf else ("", leaf)
        documented = (
            any(f"`{p}`" in text for p in prefixes)
            or bool(re.search(rf"`{re.escape(parent)}\.\w+` / `\.{re.escape(last)}`", text))
            or (len(parts) == 2 and parts[1] in _COMMON_KNOBS)
        )
        if not documented:
            missing.append(leaf)
    assert not missing, f"charts/gpuplane/README.md does not document: {missing}"


@pytest.mark.parametrize("component", sorted(WORKLOADS))
def test_each_service_can_be_disabled(helm: Helm, component: str) -> None:
    sets = [f"{component}.enabled=false"]
    if component == "controller":
        sets.append("hypervisor.controllerAddress=controller.example:9090")
    docs = helm.render(sets=tuple(sets), api_versions=(MONITORING_API,))
    assert not [
        d for d in docs if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
    ]
    for other, kind in WORKLOADS.items():
        if other != component:
            one(docs, kind, other)
    if component == "controller":
        assert "GPUPLANE_GPUCTL_CONTROLLER_ADDRESS" not in plain_env(
            container(one(docs, "Deployment", "gpuctl"))
        )
