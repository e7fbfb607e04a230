"""Translation between the NodeAgentService messages and the hypervisor's domain values."""

from __future__ import annotations

import logging

from gpuplane.controller.v1 import node_agent_pb2 as pb
from gpuplane.controller.v1 import types_pb2 as types
from gpuplane_core.errors import InvalidSpec
from gpuplane_core.quantity import parse_quantity, to_bytes
from gpuplane_hypervisor.domain.models import (
    DEFAULT_ISOLATION,
    DEFAULT_QOS,
    Allocation,
    AllocationEvent,
    DeviceInfo,
    DeviceSample,
    EventType,
    Registration,
    Resources,
)

log = logging.getLogger(__name__)

_QOS = {
    types.QOS_LEVEL_LOW: "low",
    types.QOS_LEVEL_MEDIUM: "medium",
    types.QOS_LEVEL_HIGH: "high",
    types.QOS_LEVEL_CRITICAL: "critical",
}
_ISOLATION = {
    types.ISOLATION_MODE_SHARED: "shared",
    types.ISOLATION_MODE_SOFT: "soft",
    types.ISOLATION_MODE_HARD: "hard",
    types.ISOLATION_MODE_PARTITIONED: "partitioned",
}
_ISOLATION_TO_PB = {v: k for k, v in _ISOLATION.items()}
_EVENTS = {
    pb.AllocationEvent.TYPE_ADDED: EventType.ADDED,
    pb.AllocationEvent.TYPE_MODIFIED: EventType.MODIFIED,
    pb.AllocationEvent.TYPE_DELETED: EventType.DELETED,
    pb.AllocationEvent.TYPE_SYNCED: EventType.SYNCED,
    pb.AllocationEvent.TYPE_RESET: EventType.RESET,
}


def device_to_pb(d: DeviceInfo) -> types.Device:
    return types.Device(
        uuid=d.uuid,
        vendor=d.vendor,
        model=d.model,
        index=d.index,
        numa_node=d.numa_node,
        total_memory_bytes=d.total_memory_bytes,
        max_tflops=d.max_tflops,
        healthy=d.healthy,
        unhealthy_reason=d.unhealthy_reason,
        isolation_mode=_ISOLATION_TO_PB.get(d.isolation_mode, types.ISOLATION_MODE_UNSPECIFIED),
        properties=d.properties,
    )


def _quantity(text: str, what: str, as_bytes: bool = False) -> float | int | None:
    if not text:
        return None
    try:
        return to_bytes(text) if as_bytes else float(parse_quantity(text))
    except InvalidSpec:
        # A bad amount from the controller is a bug there; treat it as unset rather than drop the worker.
        log.warning("controller sent an invalid %s quantity %r; treating it as unset", what, text[:64])
        return None


def _resources(r: types.Resources) -> Resources:
    tflops = _quantity(r.tflops, "tflops")
    vram = _quantity(r.vram, "vram", as_bytes=True)
    percent = _quantity(r.compute_percent, "compute_percent")
    return Resources(
        tflops=float(tflops) if tflops is not None else None,
        vram=int(vram) if vram is not None else None,
        compute_percent=float(percent) if percent is not None else None,
    )


def allocation_from_pb(a: pb.Allocation) -> Allocation:
    return Allocation(
        pod_uid=a.pod_uid,
        namespace=a.namespace,
        pod_name=a.pod_name,
        gpu_names=tuple(a.gpu_names),
        gpu_uuids=tuple(u.lower() for u in a.gpu_uuids),
        request=_resources(a.request),
        limit=_resources(a.limit),
        qos=_QOS.get(a.qos, DEFAULT_QOS),
        isolation=_ISOLATION.get(a.isolation, DEFAULT_ISOLATION),
        gpu_count=a.gpu_count or len(a.gpu_uuids),
        workload=a.workload,
        pool=a.pool,
    )


def event_from_pb(e: pb.AllocationEvent) -> AllocationEvent | None:
    kind = _EVENTS.get(e.type)
    if kind is None:
        return None
    alloc = allocation_from_pb(e.allocation) if e.HasField("allocation") else None
    return AllocationEvent(kind, e.revision, alloc)


def worker_usage_pb(
    allocations: list[Allocation], registrations: list[Registration], samples: dict[str, DeviceSample]
) -> list[pb.WorkerUsage]:
    by_pod: dict[str, set[int]] = {}
    for r in registrations:
        by_pod.setdefault(r.pod_uid, set()).add(r.host_pid)
    out = []
    for a in allocations:
        pids = by_pod.get(a.pod_uid, set())
        procs = [
            pb.ProcessUsage(
                device_uuid=uuid, pid=p.pid, memory_bytes=p.memory_bytes, compute_percent=p.compute_percent
            )
            for uuid in a.gpu_uuids
            if uuid in samples
            for p in samples[uuid].processes
            if p.pid in pids
        ]
        out.append(pb.WorkerUsage(pod_uid=a.pod_uid, processes=procs))
    return out
