"""Job documents: safe YAML, strict validation, translation and the reverse mapping (pure)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gpuplane_core.errors import InvalidSpec
from gpuplane_gpuctl.domain.manifests import (
    GPU_RESOURCE,
    L_POOL,
    Manifests,
    priority_class_objects,
    to_manifests,
    to_yaml_content,
)
from gpuplane_gpuctl.domain.spec import JobSpec, parse_spec
from gpuplane_gpuctl.domain.yaml_load import YamlLimits, load_document

FULL = {
    "training": """
kind: training
version: v0.1
job: {name: train-1, namespace: team-a, description: "resnet run", priority: high}
environment:
  image: pytorch/pytorch:2.4
  imagePullSecret: regcred
  command: [python, train.py]
  args: [--epochs, "3"]
  env: [{name: LR, value: 0.01}, {name: MODE, value: fast}]
resources: {pool: train-pool, gpu: 4, gpuType: H100, cpu: 16, memory: 64Gi}
storage: {workdirs: [{path: /data}, {path: /ckpt}]}
""",
    "inference": """
kind: inference
version: v0.1
job: {name: llm-serve}
environment: {image: vllm/vllm-openai:latest, args: [--model, /models/x]}
resources: {gpu: 1, cpu: 4, memory: 32Gi}
service: {replicas: 2, port: 8000, healthCheck: /health}
model: {name: llama-3-8b, path: /models/x}
""",
    "notebook": """
kind: notebook
version: v0.1
job: {name: nb, namespace: team-alice, priority: low}
environment: {image: jupyter/base-notebook:latest}
resources: {pool: dev-pool, gpu: 1, cpu: 8, memory: 32Gi}
""",
    "compute": """
kind: compute
version: v0.1
job: {name: web}
environment: {image: nginx:1.27}
resources: {cpu: 500m, memory: 256Mi}
service: {port: 80}
""",
    "fractional": """
kind: inference
version: v0.1
job: {name: small-llm}
environment: {image: vllm/vllm-openai:latest}
resources: {pool: shared, gpuType: H100, cpu: 2, memory: 8Gi, gpuShare: {tflops: 100, vram: 10Gi, qos: high}}
service: {port: 8000}
""",
}


def spec_of(text: str) -> JobSpec:
    return parse_spec(load_document(text))


def error_of(text: str, limits: YamlLimits | None = None) -> InvalidSpec:
    with pytest.raises(InvalidSpec) as e:
        parse_spec(load_document(text, limits or YamlLimits()))
    return e.value


def container(m: Manifests) -> dict[str, Any]:
    return m.workload["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


# ---- YAML safety ---------------------------------------------------------------------------


def test_billion_laughs_is_refused_quickly() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    start = time.monotonic()
    err = error_of("\n".join(lines))
    assert "aliases" in err.message
    assert time.monotonic() - start < 1.0


def test_alias_expansion_is_bounded_even_under_the_alias_count() -> None:
    # 3 aliases, but each doubles a list that is already big: expansion, not alias count, trips.
    big = "[" + ",".join(["x"] * 400) + "]"
    text = f"a: &a {big}\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b, *b, *b]\n"
    err = error_of(text, YamlLimits(max_nodes=5000, max_aliases=32))
    assert "expands to more than" in err.message


def test_deep_nesting_is_refused() -> None:
    assert "nested deeper" in error_of("a: " + "[" * 5000 + "]" * 5000).message
    nested = "kind: training\n" + "".join("  " * i + f"k{i}:\n" for i in range(60)) + "  " * 60 + "v: 1\n"
    assert "nested deeper" in error_of(nested).message


def test_oversized_document_is_refused_before_parsing() -> None:
    err = error_of("a: " + "x" * 300_000)
    assert "exceeds" in err.message


def test_malformed_yaml_names_the_position() -> None:
    err = error_of("kind: training\njob: {name: x\n")
    assert "invalid YAML at line" in err.message


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string", ""])
def test_document_must_be_a_mapping(text: str) -> None:
    assert error_of(text).message


def test_python_tags_are_not_constructed() -> None:
    assert "invalid YAML" in error_of("a: !!python/object/apply:os.system ['true']").message


# ---- strict validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        (("resources: {gpu: 1, cpu: 4, memory: 32Gi}", "resources: {gpu: 1, cpu: 4, memory: 32Gi, gpus: 2}"),
         "resources.gpus"),
        (("model: {", "model: {revision: 3, "), "model.revision"),
        (("kind: inference", "kind: inference\nextra: 1"), "extra"),
        (("job: {name: llm-serve}", "job: {name: llm-serve, owner: me}"), "job.owner"),
    ],
)  # fmt: skip
def test_unknown_keys_are_rejected_with_their_path(patch: tuple[str, str], field: str) -> None:
    err = error_of(FULL["inference"].replace(*patch))
    assert err.field == field
    assert f"unknown key '{field.rsplit('.', 1)[-1]}' at {field}" in err.message


def test_unknown_key_inside_a_list_item_names_the_index() -> None:
    err = error_of(FULL["training"].replace("{name: MODE, value: fast}", "{name: MODE, valu: fast}"))
    assert err.field == "environment.env[1].valu"


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("gpu: 1", "gpu: '1'", "resources.gpu"),
        ("gpu: 1", "gpu: -1", "resources.gpu"),
        ("cpu: 4", "cpu: lots", "resources.cpu"),
        ("memory: 32Gi", "memory: -3Gi", "resources.memory"),
        ("name: llm-serve", "name: LLM_Serve", "job.name"),
        ("name: llm-serve", "name: " + "a" * 64, "job.name"),
        ("kind: inference", "kind: batch", "kind"),
        ("version: v0.1", "version: v2", "version"),
        ("port: 8000", "port: 70000", "service.port"),
        ("healthCheck: /health", "healthCheck: health", "service.healthCheck"),
        ("replicas: 2", "replicas: 0", "service.replicas"),
    ],
)
def test_bad_values_name_the_field(old: str, new: str, field: str) -> None:
    text = FULL["inference"]
    assert old in text
    err = error_of(text.replace(old, new, 1))
    assert err.field == field, err.message
    assert field in err.message


def test_missing_required_fields_are_named() -> None:
    err = error_of(
        "kind: training\nversion: v0.1\njob: {name: x}\nenvironment: {image: a}\nresources: {gpu: 1}\n"
    )
    assert "resources.cpu: required field is missing" in err.message
    assert "resources.memory: required field is missing" in err.message


def test_kind_rules() -> None:
    assert "service.port" in error_of(FULL["compute"].replace("service: {port: 80}", "")).message
    assert "training jobs have no service" in error_of(FULL["training"] + "service: {port: 1}\n").message
    assert "only inference" in error_of(FULL["compute"] + "model: {name: x}\n").message
    assert "exclusive" in error_of(FULL["fractional"].replace("gpuType: H100", "gpu: 1")).message
    err = error_of(FULL["fractional"].replace("tflops: 100, vram: 10Gi", "tflops: 100"))
    assert err.field == "resources.gpuShare" and "vram is required" in err.message


# ---- translation ---------------------------------------------------------------------------


def test_training_becomes_a_job() -> None:
    m = to_manifests(spec_of(FULL["training"]))
    w = m.workload
    assert (w["apiVersion"], w["kind"]) == ("batch/v1", "Job")
    assert w["metadata"]["namespace"] == "team-a"
    assert w["spec"]["backoffLimit"] == 3 and w["spec"]["ttlSecondsAfterFinished"] == 86400
    pod = w["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["priorityClassName"] == "gpuctl-high"
    assert pod["nodeSelector"] == {L_POOL: "train-pool", "runwhere.ai/gpu-type": "H100"}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["volumes"][0] == {
        "name": "workdir-0",
        "hostPath": {"path": "/data", "type": "DirectoryOrCreate"},
    }
    c = container(m)
    assert c["name"] == "main"
    assert c["env"] == [{"name": "LR", "value": "0.01"}, {"name": "MODE", "value": "fast"}]
    assert (
        c["resources"]["limits"]
        == c["resources"]["requests"]
        == {"cpu": "16", "memory": "64Gi", GPU_RESOURCE: "4"}
    )
    assert [v["mountPath"] for v in c["volumeMounts"]] == ["/data", "/ckpt"]
    labels = w["metadata"]["labels"]
    assert labels["runwhere.ai/job-type"] == "training" and labels["runwhere.ai/priority"] == "high"
    assert labels["runwhere.ai/pool"] == "train-pool" and labels["runwhere.ai/namespace"] == "team-a"
    assert w["spec"]["template"]["metadata"]["labels"]["app"] == "train-1"
    assert w["metadata"]["annotations"]["runwhere.ai/description"] == "resnet run"
    assert m.service is None


def test_inference_becomes_deployment_and_nodeport_service_with_probes() -> None:
    m = to_manifests(spec_of(FULL["inference"]))
    assert m.workload["kind"] == "Deployment" and m.workload["spec"]["replicas"] == 2
    c = container(m)
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert m.service is not None and m.service["spec"]["type"] == "NodePort"
    assert m.service["spec"]["ports"][0]["port"] == 8000
    assert m.service["spec"]["selector"] == m.workload["spec"]["selector"]["matchLabels"]
    pod = m.workload["spec"]["template"]["spec"]
    # No pool: only nodes outside every pool.
    expr = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert expr["nodeSelectorTerms"][0]["matchExpressions"] == [{"key": L_POOL, "operator": "DoesNotExist"}]


def test_notebook_becomes_statefulset_on_8888() -> None:
    m = to_manifests(spec_of(FULL["notebook"]))
    assert m.workload["kind"] == "StatefulSet" and m.workload["spec"]["replicas"] == 1
    assert m.workload["spec"]["serviceName"] == "nb"
    assert m.service is not None and m.service["spec"]["ports"][0]["port"] == 8888


def test_cpu_only_jobs_get_no_gpu_toleration() -> None:
    m = to_manifests(spec_of(FULL["compute"]))
    assert "tolerations" not in m.workload["spec"]["template"]["spec"]
    assert GPU_RESOURCE not in container(m)["resources"]["limits"]


def test_fractional_share_becomes_tensorfusion_annotations() -> None:
    m = to_manifests(spec_of(FULL["fractional"]))
    tpl = m.workload["spec"]["template"]
    ann = tpl["metadata"]["annotations"]
    assert ann["tensor-fusion.ai/tflops-request"] == ann["tensor-fusion.ai/tflops-limit"] == "100"
    assert ann["tensor-fusion.ai/vram-request"] == ann["tensor-fusion.ai/vram-limit"] == "10Gi"
    assert ann["tensor-fusion.ai/qos"] == "high" and ann["tensor-fusion.ai/gpupool"] == "shared"
    assert ann["tensor-fusion.ai/gpu-model"] == "H100" and ann["tensor-fusion.ai/gpu-count"] == "1"
    assert tpl["metadata"]["labels"]["tensor-fusion.ai/enabled"] == "true"
    assert tpl["spec"]["schedulerName"] == "tensor-fusion-scheduler"
    assert GPU_RESOURCE not in container(m)["resources"]["limits"]
    pod = m.pod()
    assert pod["kind"] == "Pod" and pod["spec"]["schedulerName"] == "tensor-fusion-scheduler"


def test_percent_share() -> None:
    text = FULL["fractional"].replace("tflops: 100, vram: 10Gi", "percent: 25, vram: 4Gi")
    ann = to_manifests(spec_of(text)).workload["spec"]["template"]["metadata"]["annotations"]
    assert ann["tensor-fusion.ai/compute-percent-request"] == "25"
    assert "tensor-fusion.ai/tflops-request" not in ann


def test_priority_classes() -> None:
    pcs = {p["metadata"]["name"]: p for p in priority_class_objects()}
    assert pcs["gpuctl-high"]["value"] == 1_000_000
    assert pcs["gpuctl-medium"]["value"] == 500_000
    assert pcs["gpuctl-low"]["value"] == 100 and pcs["gpuctl-low"]["preemptionPolicy"] == "Never"


# ---- reverse mapping -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(FULL))
def test_round_trip_every_kind(name: str) -> None:
    spec = spec_of(FULL[name])
    m = to_manifests(spec)
    doc = to_yaml_content(m.workload)
    again = parse_spec(doc)  # the rebuilt document is itself a valid, strict job document
    assert to_manifests(again) == m
    assert again.job == spec.job
    assert again.environment == spec.environment
    assert again.resources == spec.resources
    assert again.storage == spec.storage
    assert again.model == spec.model


def test_reverse_mapping_reads_the_documented_shape() -> None:
    doc = to_yaml_content(to_manifests(spec_of(FULL["notebook"])).workload)
    assert doc["kind"] == "notebook" and doc["version"] == "v0.1"
    assert doc["job"] == {"name": "nb", "namespace": "team-alice", "priority": "low"}
    assert doc["resources"] == {"pool": "dev-pool", "gpu": 1, "cpu": 8, "memory": "32Gi"}
    assert doc["service"]["port"] == 8888
