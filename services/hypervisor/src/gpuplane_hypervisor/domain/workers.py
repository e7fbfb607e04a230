"""Workers served from allocations: injected env, mounts, limiter shapes, usage and the trap count."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuplane_hypervisor.domain.models import (
    Allocation,
    DeviceInfo,
    DeviceSample,
    ProcessSample,
    Registration,
    Resources,
)

SHM_CONTAINER_PATH = "/run/tensor-fusion/shm"
SNAPSHOTTABLE_QOS = ("low", "medium")


@dataclass(frozen=True)
class MountConfig:
    """Where the per-worker shared-memory directory for the limiter lives on the host."""

    shm_host_root: str = "/run/tensor-fusion/shm"


def effective_limit(alloc: Allocation) -> Resources:
    """The limit, each unset part falling back on the request (a request without limit caps itself)."""
    lim, req = alloc.limit, alloc.request
    return Resources(
        tflops=lim.tflops if lim.tflops is not None else req.tflops,
        vram=lim.vram if lim.vram is not None else req.vram,
        compute_percent=lim.compute_percent if lim.compute_percent is not None else req.compute_percent,
    )


def compute_cap(tflops_limit: float, device_max_tflops: float) -> int:
    """``ceil(tflops_limit / MaxTflops * 100)`` clamped to 1..100 (100 when the model is unknown)."""
    if device_max_tflops <= 0:
        return 100
    return max(1, min(100, math.ceil(tflops_limit / device_max_tflops * 100)))


def tflops_limit(alloc: Allocation, device: DeviceInfo | None) -> float | None:
    """Per-GPU TFLOPs limit; a compute-percent limit is converted with the device's MaxTflops."""
    lim = effective_limit(alloc)
    if lim.tflops is not None:
        return lim.tflops
    if lim.compute_percent is not None and device is not None:
        return lim.compute_percent / 100 * device.max_tflops
    return None


def compute_caps(alloc: Allocation, devices: Mapping[str, DeviceInfo]) -> list[int]:
    caps = []
    lim = effective_limit(alloc)
    for uuid in alloc.gpu_uuids:
        dev = devices.get(uuid)
        limit = tflops_limit(alloc, dev)
        if lim.tflops is None and lim.compute_percent is not None:
            caps.append(max(1, min(100, math.ceil(lim.compute_percent))))
        elif limit is None or dev is None:
            caps.append(100)
        else:
            caps.append(compute_cap(limit, dev.max_tflops))
    return caps


def injected_envs(alloc: Allocation, devices: Mapping[str, DeviceInfo]) -> dict[str, str]:
    lim = effective_limit(alloc)
    first = devices.get(alloc.gpu_uuids[0]) if alloc.gpu_uuids else None
    envs = {
        "NVIDIA_VISIBLE_DEVICES": ",".join(alloc.gpu_uuids),
        "TENSOR_FUSION_POD_UID": alloc.pod_uid,
        "TENSOR_FUSION_POD_NAME": alloc.pod_name,
        "TENSOR_FUSION_NAMESPACE": alloc.namespace,
        "TENSOR_FUSION_QOS": alloc.qos,
        "TENSOR_FUSION_ISOLATION": alloc.isolation,
        "TENSOR_FUSION_COMPUTE_LIMIT": ",".join(str(c) for c in compute_caps(alloc, devices)),
        "TENSOR_FUSION_SHM_PATH": SHM_CONTAINER_PATH,
    }
    tflops = tflops_limit(alloc, first)
    if tflops is not None:
        envs["TENSOR_FUSION_TFLOPS_LIMIT"] = f"{tflops:g}"
    if lim.vram is not None:
        envs["TENSOR_FUSION_VRAM_LIMIT"] = str(lim.vram)
    return envs


def mounts(alloc: Allocation, config: MountConfig) -> list[dict[str, Any]]:
    host = f"{config.shm_host_root.rstrip('/')}/{alloc.namespace}/{alloc.pod_name}"
    return [{"HostPath": host, "ContainerPath": SHM_CONTAINER_PATH, "ReadOnly": False}]


def _resources_json(res: Resources) -> dict[str, Any]:
    out: dict[str, Any] = {"tflops": res.tflops, "vram": res.vram}
    if res.compute_percent is not None:
        out["computePercent"] = res.compute_percent
    return out


def worker_usage(
    alloc: Allocation,
    registrations: Iterable[Registration],
    samples: Mapping[str, DeviceSample],
) -> dict[str, dict[str, ProcessSample]]:
    """``{deviceUUID: {hostPid: sample}}`` for the worker's registered processes on its devices."""
    pids = {r.host_pid for r in registrations if r.pod_uid == alloc.pod_uid}
    usage: dict[str, dict[str, ProcessSample]] = {}
    for uuid in alloc.gpu_uuids:
        sample = samples.get(uuid)
        per_pid = {str(p.pid): p for p in (sample.processes if sample else ()) if p.pid in pids}
        usage[uuid] = per_pid
    return usage


def worker_json(
    alloc: Allocation,
    devices: Mapping[str, DeviceInfo],
    registrations: Iterable[Registration],
    config: MountConfig,
) -> dict[str, Any]:
    running = any(r.pod_uid == alloc.pod_uid for r in registrations)
    return {
        "WorkerUID": alloc.pod_uid,
        "Namespace": alloc.namespace,
        "WorkerName": alloc.pod_name,
        "Workload": alloc.workload,
        "Pool": alloc.pool,
        "AllocatedDevices": list(alloc.gpu_uuids),
        "GPUNames": list(alloc.gpu_names),
        "Status": "Running" if running else "Allocated",
        "QoS": alloc.qos,
        "IsolationMode": alloc.isolation,
        "Requests": _resources_json(alloc.request),
        "Limits": _resources_json(effective_limit(alloc)),
        "Envs": injected_envs(alloc, devices),
        "Mounts": mounts(alloc, config),
    }


def usage_json(usage: Mapping[str, Mapping[str, ProcessSample]]) -> dict[str, dict[str, dict[str, Any]]]:
    return {
        uuid: {
            pid: {"memoryBytes": s.memory_bytes, "computePercent": s.compute_percent}
            for pid, s in per_pid.items()
        }
        for uuid, per_pid in usage.items()
    }


def pod_info(alloc: Allocation, devices: Mapping[str, DeviceInfo]) -> dict[str, Any]:
    """The Rust-era limiter shape of ``GET /api/v1/pod``."""
    first = devices.get(alloc.gpu_uuids[0]) if alloc.gpu_uuids else None
    caps = compute_caps(alloc, devices)
    return {
        "pod_name": alloc.pod_name,
        "namespace": alloc.namespace,
        "gpu_uuids": list(alloc.gpu_uuids),
        "tflops_limit": tflops_limit(alloc, first),
        "vram_limit": effective_limit(alloc).vram,
        "qos_level": alloc.qos,
        # Compute is sharded (throttled by the limiter) unless the worker owns whole devices unthrottled.
        "compute_shard": alloc.isolation != "shared" and any(c < 100 for c in caps),
        "isolation": alloc.isolation,
    }


def _limiter_resources(
    res: Resources, alloc: Allocation, devices: Mapping[str, DeviceInfo]
) -> dict[str, Any]:
    first = devices.get(alloc.gpu_uuids[0]) if alloc.gpu_uuids else None
    tflops = res.tflops
    if tflops is None and res.compute_percent is not None and first is not None:
        tflops = res.compute_percent / 100 * first.max_tflops
    return {"tflops": tflops, "vram": res.vram}


def limiter_entry(alloc: Allocation, devices: Mapping[str, DeviceInfo]) -> dict[str, Any]:
    limits = _limiter_resources(effective_limit(alloc), alloc, devices)
    limits["compute_percent"] = min(compute_caps(alloc, devices) or [100])
    return {
        "worker_uid": alloc.pod_uid,
        "requests": _limiter_resources(alloc.request, alloc, devices),
        "limits": limits,
    }


def snapshot_candidates(allocs: Iterable[Allocation], device_uuid: str | None) -> int:
    """Low and medium QoS workers on the device (any device when None) that could be snapshotted."""
    return sum(
        1
        for a in allocs
        if a.qos in SNAPSHOTTABLE_QOS and (device_uuid is None or device_uuid in a.gpu_uuids)
    )
