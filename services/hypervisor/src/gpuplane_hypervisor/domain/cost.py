"""Metering rows (``tf_worker_resources``, ``tf_node_metrics``) and their ``raw_cost``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuplane_hypervisor.domain.gpu_models import cost_per_hour
from gpuplane_hypervisor.domain.line_protocol import Row
from gpuplane_hypervisor.domain.models import Allocation, DeviceInfo
from gpuplane_hypervisor.domain.workers import effective_limit

GIB = 1024**3


@dataclass(frozen=True)
class QosPrice:
    """A pool's hourly prices for one QoS level (``qosConfig.pricing``)."""

    tflops_per_hour: float
    vram_gib_per_hour: float
    limits_over_requests: float


DEFAULT_PRICING: dict[str, QosPrice] = {
    "low": QosPrice(0.0025, 0.0015, 0.2),
    "medium": QosPrice(0.005, 0.003, 0.3),
    "high": QosPrice(0.0075, 0.0045, 0.4),
    "critical": QosPrice(0.01, 0.006, 0.5),
}


def _amounts(alloc: Allocation) -> tuple[float, int, float, int]:
    req_t = alloc.request.tflops or 0.0
    req_v = alloc.request.vram or 0
    lim = effective_limit(alloc)
    lim_t = lim.tflops if lim.tflops is not None else req_t
    lim_v = lim.vram if lim.vram is not None else req_v
    return req_t, req_v, lim_t, lim_v


def worker_raw_cost(alloc: Allocation, price: QosPrice, seconds: float) -> float:
    """(req·P + (lim−req)·P·r) for TFLOPs and VRAM GiB, per second, times seconds and GPU count."""
    req_t, req_v, lim_t, lim_v = _amounts(alloc)
    p_t, p_v, r = price.tflops_per_hour / 3600, price.vram_gib_per_hour / 3600, price.limits_over_requests
    per_second = (
        req_t * p_t
        + req_v / GIB * p_v
        + max(0.0, lim_t - req_t) * p_t * r
        + max(0, lim_v - req_v) / GIB * p_v * r
    )
    return per_second * seconds * max(1, alloc.gpu_count or len(alloc.gpu_uuids))


def node_raw_cost(devices: Iterable[DeviceInfo], seconds: float, node_cost_per_hour: float | None) -> float:
    if node_cost_per_hour is not None:
        return node_cost_per_hour / 3600 * seconds
    return sum(cost_per_hour(d.model) for d in devices) / 3600 * seconds


def worker_rows(
    allocs: Iterable[Allocation],
    pricing: Mapping[str, QosPrice],
    seconds: float,
    ready: Mapping[str, bool],
    timestamp_ns: int,
) -> list[Row]:
    rows = []
    for a in allocs:
        req_t, req_v, lim_t, lim_v = _amounts(a)
        price = pricing.get(a.qos) or DEFAULT_PRICING["medium"]
        rows.append(
            Row(
                "tf_worker_resources",
                {
                    "worker": a.pod_name,
                    "workload": a.workload,
                    "pool": a.pool,
                    "namespace": a.namespace,
                    "qos": a.qos,
                },
                {
                    "tflops_request": req_t,
                    "tflops_limit": lim_t,
                    "vram_bytes_request": req_v,
                    "vram_bytes_limit": lim_v,
                    "gpu_count": a.gpu_count or len(a.gpu_uuids),
                    "raw_cost": worker_raw_cost(a, price, seconds),
                    "ready": ready.get(a.pod_uid, False),
                },
                timestamp_ns,
            )
        )
    return rows


def node_row(
    node: str,
    pool: str,
    devices: list[DeviceInfo],
    allocs: Iterable[Allocation],
    seconds: float,
    node_cost_per_hour: float | None,
    timestamp_ns: int,
) -> Row:
    total_t = sum(d.max_tflops for d in devices)
    total_v = sum(d.total_memory_bytes for d in devices)
    alloc_t = 0.0
    alloc_v = 0
    for a in allocs:
        req_t, req_v, _, _ = _amounts(a)
        n = a.gpu_count or len(a.gpu_uuids)
        alloc_t += req_t * n
        alloc_v += req_v * n
    healthy = all(d.healthy for d in devices)
    return Row(
        "tf_node_metrics",
        {"node": node, "pool": pool, "phase": "Running" if healthy else "Degraded"},
        {
            "allocated_tflops": alloc_t,
            "allocated_tflops_percent": alloc_t / total_t * 100 if total_t else 0.0,
            "allocated_vram_bytes": alloc_v,
            "allocated_vram_percent": alloc_v / total_v * 100 if total_v else 0.0,
            "raw_cost": node_raw_cost(devices, seconds, node_cost_per_hour),
            "gpu_count": len(devices),
        },
        timestamp_ns,
    )
