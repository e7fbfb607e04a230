"""Every file in examples/ is accepted by the parser of the service it is meant for.

Fast and cluster-free; tests/e2e/test_examples_platform.py submits the same files to the
running platform.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuplane_controller.domain.podrequest import SCHEDULER_NAME, parse_request
from gpuplane_gpuctl.domain.manifests import to_manifests
from gpuplane_gpuctl.domain.quota import parse_quota
from gpuplane_gpuctl.domain.spec import KINDS, parse_spec
from gpuplane_gpuctl.domain.yaml_load import load_document

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
JOB_FILES = sorted(
    p.name for p in EXAMPLES.glob("*.yaml") if yaml.safe_load(p.read_text()).get("kind") in KINDS
)


def test_there_is_one_job_example_per_kind_and_a_fractional_one() -> None:
    specs = [parse_spec(load_document((EXAMPLES / f).read_text())) for f in JOB_FILES]
    assert {s.kind for s in specs} == set(KINDS)
    assert any(s.resources.gpuShare is not None for s in specs)
    assert len({s.job.name for s in specs}) == len(specs), "job names must differ"


@pytest.mark.parametrize("name", JOB_FILES)
def test_job_example_maps_to_kubernetes_objects(name: str) -> None:
    spec = parse_spec(load_document((EXAMPLES / name).read_text()))
    manifests = to_manifests(spec)
    pod = manifests.pod()["spec"]
    if spec.resources.gpuShare is not None:
        assert pod["schedulerName"] == SCHEDULER_NAME
    elif spec.resources.gpu:
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == str(spec.resources.gpu)


def test_quota_example() -> None:
    quota = parse_quota(load_document((EXAMPLES / "quota.yaml").read_text()))
    assert quota.namespace and all(limits.gpu is not None for limits in quota.namespace.values())


def test_simulate_schedule_pod_example() -> None:
    pod = yaml.safe_load((EXAMPLES / "simulate-schedule-pod.yaml").read_text())
    assert pod["kind"] == "Pod" and pod["spec"]["schedulerName"] == SCHEDULER_NAME
    pod["metadata"]["uid"] = "example"
    req = parse_request(pod, lambda: "unused")
    ann = pod["metadata"]["annotations"]
    assert req.pool == ann["tensor-fusion.ai/gpupool"]
    assert req.request.tflops_m == int(ann["tensor-fusion.ai/tflops-request"]) * 1000
    assert req.limit.tflops_m > req.request.tflops_m
