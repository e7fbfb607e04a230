"""Turning a submitted document into created Kubernetes objects.

Parsing and translation are pure (domain); this module adds the checks that
need the cluster or the controller: the namespace must exist, the name must be
free, and a fractional-GPU job must be schedulable by the controller at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpuplane_core.errors import InsufficientCapacity, NotReady
from gpuplane_core.quantity import parse_quantity
from gpuplane_gpuctl.domain.manifests import Manifests, to_manifests
from gpuplane_gpuctl.domain.quota import check_quota, job_demand
from gpuplane_gpuctl.domain.spec import GpuShare, JobSpec, parse_spec
from gpuplane_gpuctl.domain.yaml_load import YamlLimits, load_document
from gpuplane_gpuctl.grpc.capacity import CapacityClient, GpuCapacity
from gpuplane_gpuctl.ports import JobStore, QuotaSource


def parse(yaml_text: str, limits: YamlLimits) -> JobSpec:
    return parse_spec(load_document(yaml_text, limits))


@dataclass(frozen=True)
class Admitted:
    spec: JobSpec
    workload: dict[str, Any]
    placement: str | None = None  # what the controller's simulate said, for fractional jobs


def _q(v: str | int | float | None) -> Decimal:
    return parse_quantity(str(v)) if v not in (None, "") else Decimal(0)


def could_ever_fit(share: GpuShare, gpus: list[GpuCapacity], gpu_type: str | None) -> bool:
    """Whether some node has `count` GPUs whose total capacity covers the share (ignoring current use)."""
    per_node: dict[str, int] = {}
    for g in gpus:
        if gpu_type and g.model != gpu_type:
            continue
        if share.tflops is not None and _q(g.tflops) < _q(share.tflops):
            continue
        if share.vram is not None and _q(g.vram) < _q(share.vram):
            continue
        per_node[g.node] = per_node.get(g.node, 0) + 1
    return any(n >= share.count for n in per_node.values())


async def _admit_fractional(spec: JobSpec, m: Manifests, capacity: CapacityClient | None) -> str:
    if capacity is None:
        raise NotReady("fractional GPU jobs need the GPU controller, and none is configured")
    share = spec.resources.gpuShare
    assert share is not None
    result = await capacity.simulate(json.dumps(m.pod()).encode())
    if result.schedulable:
        return f"fits now on {result.node_name} ({', '.join(result.gpu_names)})"
    gpus = await capacity.gpus(spec.resources.pool)
    if could_ever_fit(share, gpus, spec.resources.gpuType):
        return f"busy now, queued: {result.message or result.failed_filter}"
    filt = f" (filter {result.failed_filter})" if result.failed_filter else ""
    raise InsufficientCapacity(
        f"gpuShare can never be scheduled: {result.message or 'no GPU fits'}{filt}",
        field="resources.gpuShare",
        code="unschedulable",
    )


async def create_job(
    yaml_text: str,
    repo: JobStore,
    capacity: CapacityClient | None,
    limits: YamlLimits,
    quotas: QuotaSource | None = None,
) -> Admitted:
    spec = parse(yaml_text, limits)
    m = to_manifests(spec)
    # Before asking the controller: an unknown namespace (404) or a taken name (409) wins.
    await repo.precheck(spec.job.namespace, spec.job.name)
    if quotas is not None:
        # The apiserver enforces quota only when the controllers create the pods, long after
        # the Job/Deployment was accepted; checking here refuses the job up front (403, naming
        # the resource). Two jobs racing past this check are still stopped at pod creation.
        check_quota(spec.job.namespace, job_demand(spec), await quotas.quota_states(spec.job.namespace))
    placement = None
    if spec.resources.gpuShare is not None:
        placement = await _admit_fractional(spec, m, capacity)
    workload = await repo.create(m)
    return Admitted(spec=spec, workload=workload, placement=placement)
