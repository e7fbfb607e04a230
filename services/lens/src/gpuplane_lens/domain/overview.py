"""The cluster overview, computed from raw Kubernetes objects (dicts) so it stays pure and fast."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplane_lens.domain.hardware import (
    GPU_PROFILES,
    GpuProfile,
    dra_devices_by_node,
    gpu_requests,
    gpus_by_profile,
    vram_bytes,
)
from gpuplane_lens.domain.quantities import parse_cpu, parse_memory_bytes

CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")


@dataclass(frozen=True)
class Component:
    """A cluster add-on recognised by workload name (any namespace)."""

    key: str
    kinds: tuple[str, ...]
    name_fragments: tuple[str, ...]


COMPONENTS: tuple[Component, ...] = (
    Component("nvidiaDevicePlugin", ("DaemonSet",), ("nvidia-device-plugin",)),
    Component("intelDevicePlugin", ("DaemonSet",), ("intel-gpu-plugin", "intel-gpu-device-plugin")),
    Component("amdDevicePlugin", ("DaemonSet",), ("amdgpu-device-plugin", "amd-gpu-device-plugin")),
    Component("monitoring", ("Deployment", "StatefulSet", "DaemonSet"), ("prometheus", "kube-state-metrics")),
)


@dataclass(frozen=True)
class DiskUsage:
    capacity: int
    used: int
    available: int


def node_role(node: Mapping[str, Any]) -> str:
    """control-plane only with the control-plane label AND a NoSchedule taint (else it runs work)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    taints = (node.get("spec") or {}).get("taints") or []
    labelled = any(label in labels for label in CONTROL_PLANE_LABELS)
    no_schedule = any(t.get("effect") == "NoSchedule" for t in taints)
    return "control-plane" if labelled and no_schedule else "worker"


def node_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _cached_images(node: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for image in (node.get("status") or {}).get("images") or []:
        names = image.get("names") or []
        tagged = [n for n in names if "@sha256:" not in n]
        if tagged or names:
            out.append((tagged or names)[0])
    return out


def node_summary(
    node: Mapping[str, Any], dra: Mapping[str, int] | None, profiles: Sequence[GpuProfile] = GPU_PROFILES
) -> dict[str, Any]:
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    info = status.get("nodeInfo") or {}
    counts = gpus_by_profile(node, dra, profiles)
    total = sum(counts.values())
    return {
        "name": meta.get("name", ""),
        "version": info.get("kubeletVersion", ""),
        "osImage": info.get("osImage", ""),
        "ready": node_ready(node),
        "schedulingDisabled": bool((node.get("spec") or {}).get("unschedulable", False)),
        "cpu": parse_cpu((status.get("capacity") or {}).get("cpu", 0)),
        "gpu": total > 0,
        "gpuCount": total,
        "gpuByProfile": dict(sorted(counts.items())),
        "vramBytes": vram_bytes(node, counts, profiles),
        "role": node_role(node),
        "cachedImages": _cached_images(node),
    }


def _workload_counts(kind: str, obj: Mapping[str, Any]) -> tuple[int, int]:
    status = obj.get("status") or {}
    if kind == "DaemonSet":
        return int(status.get("numberReady") or 0), int(status.get("desiredNumberScheduled") or 0)
    desired = (obj.get("spec") or {}).get("replicas")
    return int(status.get("readyReplicas") or 0), int(1 if desired is None else desired)


def components(
    workloads: Mapping[str, Iterable[Mapping[str, Any]]], table: Sequence[Component] = COMPONENTS
) -> dict[str, dict[str, Any]]:
    """Per component: installed, ready/desired summed over matching workloads, and a status word."""
    out: dict[str, dict[str, Any]] = {}
    for comp in table:
        ready = desired = 0
        found = False
        for kind in comp.kinds:
            for obj in workloads.get(kind, ()):
                name = str((obj.get("metadata") or {}).get("name", ""))
                if any(fragment in name for fragment in comp.name_fragments):
                    found = True
                    r, d = _workload_counts(kind, obj)
                    ready += r
                    desired += d
        if not found:
            status = "missing"
        elif desired == 0:
            status = "pending"  # installed, but nothing scheduled (yet)
        else:
            status = "ready" if ready >= desired else "degraded"
        out[comp.key] = {"installed": found, "ready": ready, "desired": desired, "status": status}
    return out


def namespaces_with_deployments(deployments: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    by_ns: dict[str, list[dict[str, Any]]] = {}
    for d in deployments:
        meta = d.get("metadata") or {}
        status = d.get("status") or {}
        replicas = (d.get("spec") or {}).get("replicas")
        by_ns.setdefault(str(meta.get("namespace", "")), []).append(
            {
                "name": meta.get("name", ""),
                "desired": int(1 if replicas is None else replicas),
                "ready": int(status.get("readyReplicas") or 0),
                "available": int(status.get("availableReplicas") or 0),
            }
        )
    return [
        {
            "name": ns,
            "deployments": sorted(items, key=lambda i: i["name"]),
            "ready": sum(1 for i in items if i["available"] >= i["desired"]),
        }
        for ns, items in sorted(by_ns.items())
    ]


def _pct(used: float, total: float) -> float:
    return round(100.0 * used / total, 1) if total > 0 else 0.0


def hardware(
    nodes: Sequence[Mapping[str, Any]],
    summaries: Sequence[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    disk: Mapping[str, DiskUsage] | None,
    memory_usage_percent: float | None,
) -> dict[str, Any]:
    """Totals over all nodes. Disk and memory figures are None (unknown) when not measured."""
    memory = sum(
        parse_memory_bytes(((n.get("status") or {}).get("capacity") or {}).get("memory", 0)) for n in nodes
    )
    usable_nodes = {s["name"] for s in summaries if s["ready"] and not s["schedulingDisabled"]}
    known_nodes = {s["name"] for s in summaries}
    allocated = 0
    allocated_usable = 0
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        node_name = (pod.get("spec") or {}).get("nodeName")
        # Pods left on a deleted node hold nothing anymore.
        if node_name not in known_nodes or phase in ("Succeeded", "Failed"):
            continue
        n = gpu_requests(pod)
        allocated += n
        if node_name in usable_nodes:
            allocated_usable += n
    total = sum(s["gpuCount"] for s in summaries)
    usable = sum(s["gpuCount"] for s in summaries if s["name"] in usable_nodes)
    accelerators: dict[str, int] = {}
    for s in summaries:
        for profile, n in s["gpuByProfile"].items():
            accelerators[profile] = accelerators.get(profile, 0) + n
    out: dict[str, Any] = {
        "nodes": len(nodes),
        "cpuCores": round(sum(float(s["cpu"]) for s in summaries), 3),
        "memoryBytes": memory,
        "memoryUsagePercent": None,
        "memoryAvailableBytes": None,
        "diskBytes": None,
        "diskUsedBytes": None,
        "diskAvailableBytes": None,
        "diskUsagePercent": None,
        "gpuNodes": sum(1 for s in summaries if s["gpuCount"] > 0),
        "gpuCount": total,
        "totalGpuCount": total,
        "accelerators": [{"id": k, "gpuCount": v} for k, v in sorted(accelerators.items())],
        "vramBytes": sum(int(s["vramBytes"]) for s in summaries),
        "allocatedGpuCount": allocated,
        "availableGpuCount": max(usable - allocated_usable, 0),
        "usableGpuCount": usable,
    }
    if memory_usage_percent is not None:
        out["memoryUsagePercent"] = round(memory_usage_percent, 1)
        out["memoryAvailableBytes"] = int(memory * (1 - memory_usage_percent / 100.0))
    # Disk is reported only when every Ready node answered: a partial sum would read as "less disk".
    ready_nodes = [s["name"] for s in summaries if s["ready"]]
    if disk is not None and ready_nodes and all(n in disk for n in ready_nodes):
        cap = sum(disk[n].capacity for n in ready_nodes)
        used = sum(disk[n].used for n in ready_nodes)
        avail = sum(disk[n].available for n in ready_nodes)
        out.update(
            diskBytes=cap, diskUsedBytes=used, diskAvailableBytes=avail, diskUsagePercent=_pct(used, cap)
        )
    return out


def overview(
    nodes: Sequence[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    workloads: Mapping[str, Sequence[Mapping[str, Any]]],
    disk: Mapping[str, DiskUsage] | None,
    memory_usage_percent: float | None,
) -> dict[str, Any]:
    dra = dra_devices_by_node(slices)
    summaries = [node_summary(n, dra.get(str((n.get("metadata") or {}).get("name")))) for n in nodes]
    summaries.sort(key=lambda s: s["name"])
    return {
        "components": components(workloads),
        "nodes": summaries,
        "namespaces": namespaces_with_deployments(workloads.get("Deployment", ())),
        "hardware": hardware(nodes, summaries, pods, disk, memory_usage_percent),
    }


def disk_from_summary(summary: Mapping[str, Any]) -> DiskUsage | None:
    """The node filesystem from a kubelet /stats/summary document."""
    fs = (summary.get("node") or {}).get("fs") or {}
    try:
        return DiskUsage(int(fs["capacityBytes"]), int(fs["usedBytes"]), int(fs["availableBytes"]))
    except (KeyError, TypeError, ValueError):
        return None
