"""Static checks of the CRDs in charts/gpuplane/crds and the samples in charts/gpuplane/crd-samples.

No cluster needed. The schema checks mirror what kube-apiserver enforces for structural schemas (types,
pruning of unknown fields, enum, minimum/maximum, pattern, required, int-or-string) closely enough to
catch typos in the YAML; tests/integration/test_crds.py checks the same files against a real apiserver.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from crd_files import (
    CRD_DIR,
    CRDS,
    GROUP,
    INVALID_SAMPLES,
    VALID_SAMPLES,
    VERSION,
    expectations,
    load,
)

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

# kind -> (file, plural, scope, shortNames)
INTENDED: dict[str, tuple[str, str, str, list[str]]] = {
    "GPUPool": ("gpupools.yaml", "gpupools", "Cluster", ["gp"]),
    "GPUNode": ("gpunodes.yaml", "gpunodes", "Cluster", ["gn"]),
    "GPU": ("gpus.yaml", "gpus", "Cluster", []),
    "GPUNodeClaim": ("gpunodeclaims.yaml", "gpunodeclaims", "Cluster", ["gnc"]),
    "TensorFusionWorkload": ("tensorfusionworkloads.yaml", "tensorfusionworkloads", "Namespaced", ["tfw"]),
    "WorkloadProfile": ("workloadprofiles.yaml", "workloadprofiles", "Namespaced", ["tfwp"]),
    "TensorFusionConnection": (
        "tensorfusionconnections.yaml",
        "tensorfusionconnections",
        "Namespaced",
        ["tfconn"],
    ),
    "GPUResourceQuota": ("gpuresourcequotas.yaml", "gpuresourcequotas", "Namespaced", ["gpuquota"]),
    "SchedulingConfigTemplate": (
        "schedulingconfigtemplates.yaml",
        "schedulingconfigtemplates",
        "Cluster",
        ["sct"],
    ),
}

_WORKLOAD_FIELDS = [
    "spec.replicas",
    "spec.poolName",
    "spec.resources.requests.tflops",
    "spec.resources.requests.vram",
    "spec.resources.limits.tflops",
    "spec.resources.limits.vram",
    "spec.qos",
    "spec.isolation",
    "spec.gpuModel",
    "spec.gpuCount",
    "spec.vendor",
    "spec.isLocalGPU",
    "spec.gangScheduling.minMembers",
    "spec.gangScheduling.timeout",
    "status.phase",
    "status.workerCount",
    "status.readyWorkers",
]

# Every field that shared/reference/tensorfusion.md lists, as schema paths ("x[]" steps into array items).
REFERENCE_FIELDS: dict[str, list[str]] = {
    "GPU": [
        "status.phase",
        "status.vendor",
        "status.model",
        "status.capacity.tflops",
        "status.capacity.vram",
        "status.available.tflops",
        "status.available.vram",
        "status.uuid",
        "status.index",
        "status.numaNode",
        "status.nodeSelector",
        "status.isolationMode",
        "status.usedBy",
        "status.runningApps[].name",
        "status.runningApps[].namespace",
        "status.runningApps[].count",
        "status.runningApps[].pods[]",
        "status.message",
    ],
    "GPUNode": [
        "spec.manageMode",
        "spec.costPerHour",
        "status.phase",
        "status.totalTFlops",
        "status.totalVRAM",
        "status.availableTFlops",
        "status.availableVRAM",
        "status.virtualTFlops",
        "status.virtualVRAM",
        "status.hypervisorStatus.hypervisorState",
        "status.hypervisorStatus.hypervisorVersion",
        "status.hypervisorStatus.lastHeartbeatTime",
        "status.totalGPUs",
        "status.managedGPUs",
        "status.managedGPUDeviceIDs[]",
        "status.allocatedPods",
    ],
    "GPUPool": [
        "spec.capacityConfig.minResources.tflops",
        "spec.capacityConfig.maxResources.vram",
        "spec.capacityConfig.warmResources.tflops",
        "spec.capacityConfig.oversubscription.tflopsOversellRatio",
        "spec.capacityConfig.oversubscription.vramExpandToHostMem",
        "spec.capacityConfig.oversubscription.vramExpandToHostDisk",
        "spec.nodeManagerConfig.provisioningMode",
        "spec.nodeManagerConfig.defaultIsolationMode",
        "spec.nodeManagerConfig.nodeSelector",
        "spec.qosConfig.defaultQoS",
        "spec.qosConfig.pricing[].qos",
        "spec.qosConfig.pricing[].requests.perFP16TFlopsPerHour",
        "spec.qosConfig.pricing[].requests.perGBOfVRAMPerHour",
        "spec.qosConfig.pricing[].limitsOverRequests",
        "spec.componentConfig.hypervisor.portNumber",
        "spec.schedulingConfigTemplate",
    ],
    "TensorFusionWorkload": _WORKLOAD_FIELDS,
    "WorkloadProfile": _WORKLOAD_FIELDS,
    "TensorFusionConnection": [
        "spec.workloadName",
        "spec.clientPod",
        "status.phase",
        "status.connectionURL",
        "status.workerName",
    ],
    "GPUResourceQuota": [
        "spec.total.requests.tflops",
        "spec.total.requests.vram",
        "spec.total.limits.tflops",
        "spec.total.limits.vram",
        "spec.total.maxWorkers",
        "spec.total.alertThresholdPercent",
        "spec.single.maxRequests.tflops",
        "spec.single.maxLimits.vram",
        "spec.single.maxGPUCount",
        "spec.single.defaultRequests.tflops",
        "spec.single.defaultLimits.vram",
        "status.used.requests.tflops",
        "status.availablePercent",
    ],
    "SchedulingConfigTemplate": [
        "spec.placement.mode",
        "spec.placement.allowUsingLocalGPU",
        "spec.placement.gpuFilters[].type",
        "spec.placement.gpuFilters[].params",
        "spec.hypervisor",
    ],
}

QOS = ["low", "medium", "high", "critical"]
ISOLATION = ["shared", "soft", "hard", "partitioned"]
ENUMS: dict[str, dict[str, list[str]]] = {
    "GPU": {
        "status.phase": ["Pending", "Updating", "Running", "Unknown", "Destroying", "Migrating"],
        "status.isolationMode": ISOLATION,
    },
    "GPUNode": {
        "status.phase": [
            "Pending",
            "Provisioning",
            "Migrating",
            "Running",
            "Succeeded",
            "Failed",
            "Unknown",
            "Destroying",
        ],
    },
    "GPUPool": {
        "spec.qosConfig.defaultQoS": QOS,
        "spec.qosConfig.pricing[].qos": QOS,
        "spec.nodeManagerConfig.defaultIsolationMode": ISOLATION,
    },
    "TensorFusionWorkload": {"spec.qos": QOS, "spec.isolation": ISOLATION},
    "WorkloadProfile": {"spec.qos": QOS, "spec.isolation": ISOLATION},
    "TensorFusionConnection": {"status.phase": ["Pending", "Starting", "Running", "Failed", "Unknown"]},
    "SchedulingConfigTemplate": {
        "spec.placement.mode": ["CompactFirst", "LowLoadFirst", "NodeCompactGPULowLoad"],
    },
}

# The only places where arbitrary content is accepted.
FREE_FORM = {
    ("SchedulingConfigTemplate", "spec.hypervisor"),
    ("SchedulingConfigTemplate", "spec.placement.gpuFilters[].params"),
}

QUANTITY_NAMES = {
    "tflops",
    "vram",
    "compute",
    "totalTFlops",
    "totalVRAM",
    "availableTFlops",
    "availableVRAM",
    "virtualTFlops",
    "virtualVRAM",
}

PRINTER_TYPES = {"integer", "number", "string", "boolean", "date"}


# ---------------------------------------------------------------- loading


def _schema(kind: str) -> dict[str, Any]:
    (version,) = CRDS[kind]["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _split_jsonpath(path: str) -> list[str]:
    """`.a.b\\.c` -> ["a", "b.c"] (kubectl's escaped-dot syntax)."""
    assert path.startswith(".")
    return [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", path[1:])]


def _resolve(schema: dict[str, Any], steps: list[str]) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for step in steps:
        if node is None:
            return None
        is_list = step.endswith("[]")
        name = step.removesuffix("[]")
        if name in node.get("properties", {}):
            node = node["properties"][name]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
        if is_list:
            node = node.get("items") if node.get("type") == "array" else None
    return node


def _walk(node: dict[str, Any], path: str = "", name: str = "") -> list[tuple[str, str, dict[str, Any]]]:
    """Every schema node as (path, property name, node); items add "[]" and map values "{}" to the path."""
    out = [(path, name, node)]
    for key, child in node.get("properties", {}).items():
        out += _walk(child, f"{path}.{key}" if path else key, key)
    if isinstance(node.get("items"), dict):
        out += _walk(node["items"], path + "[]", name)
    if isinstance(node.get("additionalProperties"), dict):
        out += _walk(node["additionalProperties"], path + "{}", name)
    return out


# ---------------------------------------------------------------- schema validation (jsonschema)


def _as_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """Make unknown fields an error, as fieldValidation=Strict does; x-kubernetes-* keys are ignored."""
    out = copy.deepcopy(node)
    for _path, _name, sub in _walk(out):
        if sub.get("type") == "object" and not sub.get("x-kubernetes-preserve-unknown-fields"):
            if "additionalProperties" not in sub and "properties" in sub:
                sub["additionalProperties"] = False
    if "metadata" in out.get("properties", {}):
        out["properties"]["metadata"] = {"type": "object"}  # ObjectMeta is the apiserver's own business
    return out


def validate(schema: dict[str, Any], value: Any) -> list[str]:
    """Errors as "path: message", naming unknown and missing fields by their full path."""
    errors: list[str] = []
    for e in jsonschema.Draft4Validator(_as_json_schema(schema)).iter_errors(value):
        path = ".".join(str(p) for p in e.absolute_path)
        prefix = f"{path}." if path else ""
        if e.validator == "additionalProperties":
            known = set(e.schema.get("properties", {}))
            errors += [f"{prefix}{k}: unknown field" for k in sorted(set(e.instance) - known)]
        elif e.validator == "required":
            errors += [f"{prefix}{k}: Required value" for k in e.validator_value if k not in e.instance]
        else:
            errors.append(f"{path or '<root>'}: {e.message}")
    return errors


# ---------------------------------------------------------------- the CRDs


def test_crd_files_are_exactly_the_intended_kinds() -> None:
    assert sorted(p.name for p in CRD_DIR.glob("*.yaml")) == sorted(f for f, *_ in INTENDED.values())
    assert set(CRDS) == set(INTENDED)
    assert not list(CRD_DIR.glob("*.yml")), "use the .yaml extension"


@pytest.mark.parametrize("kind", sorted(INTENDED))
def test_crd_header_comment(kind: str) -> None:
    lines = (CRD_DIR / INTENDED[kind][0]).read_text().splitlines()
    assert all(line.startswith("# ") for line in lines[:3])
    assert not lines[3].startswith("#")


@pytest.mark.parametrize("kind", sorted(INTENDED))
def test_crd_identity_group_version_scope(kind: str) -> None:
    crd = CRDS[kind]
    _file, plural, scope, short_names = INTENDED[kind]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.{GROUP}"
    spec = crd["spec"]
    assert spec["group"] == GROUP
    assert spec["scope"] == scope
    names = spec["names"]
    assert names["kind"] == kind
    assert names["listKind"] == f"{kind}List"
    assert names["plural"] == plural
    assert names["singular"] == kind.lower()
    assert names.get("shortNames", []) == short_names
    assert names["categories"] == ["tensor-fusion"]
    assert [(v["name"], v["served"], v["storage"]) for v in spec["versions"]] == [(VERSION, True, True)]


def test_short_names_are_unique() -> None:
    all_names = [n for crd in CRDS.values() for n in crd["spec"]["names"].get("shortNames", [])]
    assert len(all_names) == len(set(all_names))


@pytest.mark.parametrize("kind", sorted(INTENDED))
def test_status_subresource(kind: str) -> None:
    (version,) = CRDS[kind]["spec"]["versions"]
    assert version["subresources"]["status"] == {}
    assert _schema(kind)["properties"]["status"]["type"] == "object"


@pytest.mark.parametrize("kind", sorted(INTENDED))
def test_printer_columns(kind: str) -> None:
    (version,) = CRDS[kind]["spec"]["versions"]
    cols = version["additionalPrinterColumns"]
    assert len(cols) >= 3
    names = [c["name"] for c in cols]
    assert len(names) == len(set(names))
    for col in cols:
        assert set(col) <= {"name", "type", "jsonPath", "priority", "description", "format"}
        assert col["type"] in PRINTER_TYPES
        steps = _split_jsonpath(col["jsonPath"])
        if steps[0] == "metadata":
            continue
        target = _resolve(_schema(kind), steps)
        assert target is not None, f"{col['name']}: {col['jsonPath']} is not in the schema"
        if col["type"] == "integer":
            assert target.get("type") == "integer", col["name"]
        if col["type"] == "boolean":
            assert target.get("type") == "boolean", col["name"]
    assert cols[-1] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


EXPECTED_COLUMNS = {
    "GPU": ["Node", "Model", "Phase", "TFLOPs Available", "VRAM Available", "Age"],
    "GPUNode": ["Phase", "Total TFLOPs", "Available TFLOPs", "Total VRAM", "GPUs", "Age"],
    "GPUPool": ["Phase", "TFLOPs", "VRAM", "Nodes", "Age"],
    "TensorFusionWorkload": ["Replicas", "Ready", "Phase", "Age"],
    "TensorFusionConnection": ["Phase", "URL", "Worker", "Age"],
}


@pytest.mark.parametrize("kind", sorted(EXPECTED_COLUMNS))
def test_operator_facing_columns_are_shown_by_default(kind: str) -> None:
    (version,) = CRDS[kind]["spec"]["versions"]
    default = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    for name in EXPECTED_COLUMNS[kind]:
        assert name in default


@pytest.mark.parametrize("kind", sorted(INTENDED))
def test_schema_is_structural(kind: str) -> None:
    root = _schema(kind)
    assert root["type"] == "object"
    assert set(root["properties"]) <= {"apiVersion", "kind", "metadata", "spec", "status"}
    assert root["properties"]["metadata"] == {"type": "object"}
    for path, _name, node in _walk(root):
        loc = f"{kind} {path or '<root>'}"
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], loc
            assert "type" not in node, loc
        else:
            assert "anyOf" not in node and "oneOf" not in node and "allOf" not in node, loc
            assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, loc
        assert not ("properties" in node and "additionalProperties" in node), loc
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), loc
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert (kind, path) in FREE_FORM, (
                f"{loc}: preserve-unknown-fields outside the free-form allow-list"
            )
            assert node["type"] == "object", loc
        keys = node.get("x-kubernetes-list-map-keys")
        if keys:
            assert node["x-kubernetes-list-type"] == "map", loc
            assert set(keys) <= set(node["items"].get("required", [])), loc
        if "default" in node:
            assert validate(node, node["default"]) == [], loc
        for req in node.get("required", []):
            assert req in node.get("properties", {}), f"{loc}: required {req} is not a property"
        if "enum" in node:
            assert len(node["enum"]) == len(set(node["enum"])), loc
            for value in node["enum"]:
                assert validate({"type": node["type"]}, value) == [], loc
        if "pattern" in node:
            re.compile(node["pattern"])
    for name in ("spec", "status"):
        if name in root["properties"]:
            assert not root["properties"][name].get("x-kubernetes-preserve-unknown-fields"), name


@pytest.mark.parametrize("kind", sorted(REFERENCE_FIELDS))
def test_reference_fields_present(kind: str) -> None:
    missing = [p for p in REFERENCE_FIELDS[kind] if _resolve(_schema(kind), p.split(".")) is None]
    assert missing == []


@pytest.mark.parametrize(("kind", "path"), [(k, p) for k, paths in ENUMS.items() for p in paths])
def test_enums(kind: str, path: str) -> None:
    node = _resolve(_schema(kind), path.split("."))
    assert node is not None
    assert node["type"] == "string"
    assert node["enum"] == ENUMS[kind][path]


@pytest.mark.parametrize("kind", sorted(INTENDED))
def test_quantity_fields_are_int_or_string(kind: str) -> None:
    count = 0
    for path, name, node in _walk(_schema(kind)):
        if name in QUANTITY_NAMES and not path.endswith(("[]", "{}")):
            assert node.get("x-kubernetes-int-or-string") is True, f"{path} must be int-or-string"
        if node.get("x-kubernetes-int-or-string"):
            count += 1
            assert node["pattern"] == QUANTITY_PATTERN, path
    if kind not in {"TensorFusionConnection", "SchedulingConfigTemplate"}:
        assert count >= 2


def test_quantity_pattern_accepts_and_rejects() -> None:
    node: dict[str, Any] = {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }
    for ok in [989, "989", "80Gi", "0.5", "500m", "1e3", "1.5T", ".5"]:
        assert validate(node, ok) == [], ok
    for bad in ["lots", "80 Gi", "80GB", "", "1.2.3", 1.5, True]:
        assert validate(node, bad) != [], bad


@pytest.mark.parametrize(
    ("kind", "path", "minimum"),
    [
        ("TensorFusionWorkload", "spec.replicas", 0),
        ("TensorFusionWorkload", "spec.gpuCount", 1),
        ("WorkloadProfile", "spec.replicas", 0),
        ("WorkloadProfile", "spec.gpuCount", 1),
        ("GPUPool", "spec.componentConfig.hypervisor.portNumber", 1),
        ("GPUPool", "spec.capacityConfig.oversubscription.tflopsOversellRatio", 0),
        ("GPUResourceQuota", "spec.single.maxGPUCount", 1),
        ("GPUResourceQuota", "spec.total.alertThresholdPercent", 0),
    ],
)
def test_minimums(kind: str, path: str, minimum: int) -> None:
    node = _resolve(_schema(kind), path.split("."))
    assert node is not None
    assert node["type"] == "integer"
    assert node["minimum"] == minimum
    if path.endswith("portNumber"):
        assert node["maximum"] == 65535


# ---------------------------------------------------------------- the samples


def test_every_kind_has_a_valid_sample() -> None:
    kinds = sorted(load(p)["kind"] for p in VALID_SAMPLES)
    assert kinds == sorted(INTENDED)
    assert len(INVALID_SAMPLES) >= 4


@pytest.mark.parametrize("path", VALID_SAMPLES + INVALID_SAMPLES, ids=lambda p: p.name)
def test_sample_has_a_crd(path: Path) -> None:
    obj = load(path)
    assert obj["apiVersion"] == f"{GROUP}/{VERSION}"
    assert obj["kind"] in CRDS
    assert "namespace" not in obj["metadata"], "the tests set the namespace"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", obj["metadata"]["name"])


@pytest.mark.parametrize("path", VALID_SAMPLES, ids=lambda p: p.name)
def test_valid_sample_matches_schema(path: Path) -> None:
    obj = load(path)
    assert path.stem == obj["kind"].lower()
    assert validate(_schema(obj["kind"]), obj) == []
    assert obj.get("status"), "give every sample a status so the status subresource is exercised"


@pytest.mark.parametrize("path", INVALID_SAMPLES, ids=lambda p: p.name)
def test_invalid_sample_is_rejected_by_schema(path: Path) -> None:
    expect = expectations(path)
    assert expect["expect-status"] in {"400", "422"}
    if expect["expect-status"] == "400":
        assert expect.get("field-validation") == "Strict"
    obj = load(path)
    errors = validate(_schema(obj["kind"]), obj)
    assert errors, "sample unexpectedly valid"
    assert any(e.startswith(expect["expect-field"] + ":") for e in errors), errors
