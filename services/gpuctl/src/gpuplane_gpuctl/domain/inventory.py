"""Nodes, pools and GPUs as gpuctl shows them, computed from node and pod rows (pure).

A pool is the set of nodes labelled `runwhere.ai/pool=<name>`; its description
lives in the node annotation `runwhere.ai/pool-description` (set on every node
when the pool is created, so a pool needs no other object). GPU usage is the
sum of `nvidia.com/gpu` requests of the pods bound to a node that have not
finished, plus (when the controller reports them) GPUs that hold fractional
workers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from gpuplane_core.errors import InvalidSpec
from gpuplane_core.quantity import parse_quantity
from gpuplane_gpuctl.domain.labels import GPU_TYPE_LABEL, POOL_LABEL, is_gpu_label
from gpuplane_gpuctl.domain.views import parse_time

GPU_RESOURCE = "nvidia.com/gpu"
A_POOL_DESCRIPTION = "runwhere.ai/pool-description"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB per GPU, as GPU feature discovery reports it
FINISHED = ("Succeeded", "Failed")


def _q(v: Any) -> Decimal:
    try:
        return parse_quantity(str(v)) if v not in (None, "") else Decimal(0)
    except (ValueError, ArithmeticError):
        return Decimal(0)


def _cpu_text(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _mem_text(n: int) -> str:
    for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


@dataclass(frozen=True)
class PodUse:
    """What one unfinished pod takes from its node."""

    namespace: str
    name: str
    node: str | None
    phase: str
    gpu: int
    cpu_milli: int
    memory: int
    labels: dict[str, str]


def _requests(container: dict[str, Any]) -> dict[str, Decimal]:
    res = container.get("resources") or {}
    req = dict(res.get("limits") or {})  # a missing request defaults to the limit
    req.update(res.get("requests") or {})
    return {k: _q(v) for k, v in req.items()}


def pod_use(pod: dict[str, Any]) -> PodUse | None:
    """None for a finished pod (it holds nothing any more)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    if phase in FINISHED:
        return None
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in _requests(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:  # effective request: max(sum of containers, any init)
        for k, v in _requests(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    return PodUse(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        node=spec.get("nodeName") or None,
        phase=phase,
        gpu=int(total.get(GPU_RESOURCE, 0)),
        cpu_milli=int(total.get("cpu", 0) * 1000),
        memory=int(total.get("memory", 0)),
        labels=dict(meta.get("labels") or {}),
    )


@dataclass(frozen=True)
class NodeRow:
    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    status: str
    created: datetime | None
    gpu_total: int
    cpu_capacity_milli: int
    cpu_allocatable_milli: int
    memory_capacity: int
    memory_allocatable: int
    taints: list[dict[str, Any]]

    @property
    def pool(self) -> str | None:
        return self.labels.get(POOL_LABEL)

    @property
    def gpu_type(self) -> str | None:
        return self.labels.get(GPU_TYPE_LABEL)


def node_status(node: dict[str, Any]) -> str:
    ready = "Unknown"
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            ready = "Ready" if c.get("status") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        return f"{ready},SchedulingDisabled"
    return ready


def node_row(node: dict[str, Any]) -> NodeRow:
    meta = node.get("metadata") or {}
    st = node.get("status") or {}
    cap, alloc = st.get("capacity") or {}, st.get("allocatable") or st.get("capacity") or {}
    return NodeRow(
        name=meta.get("name", ""),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        status=node_status(node),
        created=parse_time(meta.get("creationTimestamp")),
        gpu_total=int(_q(alloc.get(GPU_RESOURCE))),
        cpu_capacity_milli=int(_q(cap.get("cpu")) * 1000),
        cpu_allocatable_milli=int(_q(alloc.get("cpu")) * 1000),
        memory_capacity=int(_q(cap.get("memory"))),
        memory_allocatable=int(_q(alloc.get("memory"))),
        taints=list((node.get("spec") or {}).get("taints") or []),
    )


@dataclass
class NodeUse:
    gpu: int = 0
    cpu_milli: int = 0
    memory: int = 0
    pods: list[PodUse] = field(default_factory=list)
    shared_gpus: int = 0  # GPUs holding fractional workers (from the controller)


def pods_pool(pod: PodUse) -> str | None:
    """The pool a gpuctl job's pod is bound for (its `runwhere.ai/pool` label)."""
    return pod.labels.get(POOL_LABEL)


def usage_by_node(pods: Iterable[PodUse]) -> dict[str, NodeUse]:
    out: dict[str, NodeUse] = {}
    for p in pods:
        if p.node is None:
            continue
        u = out.get(p.node)
        if u is None:
            u = out[p.node] = NodeUse()
        u.gpu += p.gpu
        u.cpu_milli += p.cpu_milli
        u.memory += p.memory
        u.pods.append(p)
    return out


def gpu_used(node: NodeRow, use: NodeUse | None) -> int:
    if use is None:
        return 0
    return min(node.gpu_total, use.gpu + use.shared_gpus) if node.gpu_total else use.gpu


def node_item(node: NodeRow, use: NodeUse | None) -> dict[str, Any]:
    used = gpu_used(node, use)
    u = use or NodeUse()
    return {
        "nodeName": node.name,
        "status": node.status,
        "gpuTotal": node.gpu_total,
        "gpuUsed": used,
        "gpuFree": max(0, node.gpu_total - used),
        "boundPools": [node.pool] if node.pool else [],
        "cpu": {
            "capacity": _cpu_text(node.cpu_capacity_milli),
            "allocatable": _cpu_text(node.cpu_allocatable_milli),
            "requested": _cpu_text(u.cpu_milli),
        },
        "memory": {
            "capacity": _mem_text(node.memory_capacity),
            "allocatable": _mem_text(node.memory_allocatable),
            "requested": _mem_text(u.memory),
        },
        "gpuType": node.gpu_type,
        "createdAt": node.created.isoformat() if node.created else None,
    }


def node_detail(node: NodeRow, use: NodeUse | None) -> dict[str, Any]:
    u = use or NodeUse()
    return {
        **node_item(node, use),
        "labels": node.labels,
        "taints": node.taints,
        "pods": [
            {"namespace": p.namespace, "name": p.name, "phase": p.phase, "gpu": p.gpu}
            for p in sorted(u.pods, key=lambda p: (p.namespace, p.name))
        ],
    }


def filter_nodes(
    nodes: Iterable[NodeRow], pool: str | None, gpu_type: str | None, status: str | None
) -> list[NodeRow]:
    want = status.lower() if status else None
    out = []
    for n in nodes:
        if pool is not None and n.pool != pool:
            continue
        if gpu_type is not None and n.gpu_type != gpu_type:
            continue
        if want is not None and want not in n.status.lower().split(","):
            continue
        out.append(n)
    out.sort(key=lambda n: n.name)
    return out


def node_page(nodes: list[NodeRow], usage: dict[str, NodeUse], page: int, page_size: int) -> dict[str, Any]:
    start = (page - 1) * page_size
    items = [node_item(n, usage.get(n.name)) for n in nodes[start : start + page_size]]
    return {"total": len(nodes), "page": page, "pageSize": page_size, "items": items}


def pool_views(
    nodes: Iterable[NodeRow], usage: dict[str, NodeUse], pending: Iterable[PodUse] = ()
) -> list[dict[str, Any]]:
    """Pools with GPU totals; `used` also counts pods still waiting for a node of the pool."""
    pools: dict[str, dict[str, Any]] = {}
    for n in nodes:
        if not n.pool:
            continue
        p = pools.setdefault(
            n.pool,
            {"name": n.pool, "description": None, "gpuTotal": 0, "gpuUsed": 0, "gpuFree": 0,
             "gpuType": set(), "nodes": [], "_ready": 0},
        )  # fmt: skip
        p["gpuTotal"] += n.gpu_total
        p["gpuUsed"] += gpu_used(n, usage.get(n.name))
        if n.gpu_type:
            p["gpuType"].add(n.gpu_type)
        if p["description"] is None and n.annotations.get(A_POOL_DESCRIPTION):
            p["description"] = n.annotations[A_POOL_DESCRIPTION]
        p["nodes"].append(n.name)
        p["_ready"] += n.status == "Ready"
    for pod in pending:
        target = pods_pool(pod)
        if pod.node is None and target in pools:
            pools[target]["gpuUsed"] += pod.gpu
    out = []
    for name in sorted(pools):
        p = pools[name]
        p["gpuFree"] = max(0, p["gpuTotal"] - p["gpuUsed"])
        ready = p.pop("_ready")
        p["gpuType"] = sorted(p["gpuType"])
        p["nodes"].sort()
        p["nodeCount"] = len(p["nodes"])
        p["status"] = "active" if ready == len(p["nodes"]) else ("degraded" if ready else "inactive")
        out.append(p)
    return out


@dataclass(frozen=True)
class Gpu:
    """One GPU as the controller reports it (fractional allocations)."""

    name: str
    node: str
    model: str
    vram: str
    tflops: str
    available_tflops: str
    available_vram: str
    workers: list[str]


def _share(capacity: str, available: str) -> float:
    cap = _q(capacity)
    if cap <= 0:
        return 0.0
    return round(float((cap - _q(available)) / cap), 4)


def gpu_detail(
    nodes: Iterable[NodeRow], usage: dict[str, NodeUse], controller_gpus: list[Gpu] | None
) -> list[dict[str, Any]]:
    """Every GPU of every GPU node.

    With the controller, a node's GPUs are the controller's (allocated share
    from its tflops/vram accounting, pods are the fractional workers); nodes it
    does not know, and every node without a controller, are described from
    node capacity and whole-GPU pod requests, handed out to GPU indices in pod order.
    """
    by_node: dict[str, list[Gpu]] = {}
    for g in controller_gpus or []:
        by_node.setdefault(g.node, []).append(g)
    out = []
    for n in sorted(nodes, key=lambda n: n.name):
        if n.gpu_total == 0 and n.name not in by_node:
            continue
        gpus: list[dict[str, Any]] = []
        if n.name in by_node:
            source = "controller"
            for g in by_node[n.name]:
                share = max(_share(g.tflops, g.available_tflops), _share(g.vram, g.available_vram))
                gpus.append(
                    {"index": len(gpus), "name": g.name, "model": g.model or n.gpu_type,
                     "memory": g.vram, "allocated": share, "pods": sorted(g.workers)}
                )  # fmt: skip
        else:
            source = "requests"
            mib = n.labels.get(GPU_MEMORY_LABEL)
            memory = f"{mib}Mi" if mib and mib.isdigit() else None
            holders: list[str] = []
            use = usage.get(n.name)
            for p in sorted(use.pods if use else [], key=lambda p: (p.namespace, p.name)):
                holders += [f"{p.namespace}/{p.name}"] * p.gpu
            for i in range(n.gpu_total):
                holder = holders[i] if i < len(holders) else None
                gpus.append(
                    {"index": i, "name": f"{n.name}-gpu-{i}", "model": n.gpu_type, "memory": memory,
                     "allocated": 1.0 if holder else 0.0, "pods": [holder] if holder else []}
                )  # fmt: skip
        out.append(
            {"nodeName": n.name, "gpuType": n.gpu_type, "boundPools": [n.pool] if n.pool else [],
             "source": source, "gpus": gpus}
        )  # fmt: skip
    return out


def add_shared(usage: dict[str, NodeUse], controller_gpus: list[Gpu]) -> None:
    """Count GPUs that hold fractional workers as used on their node."""
    for g in controller_gpus:
        if g.workers:
            usage.setdefault(g.node, NodeUse()).shared_gpus += 1


def gpu_labels(nodes: Iterable[NodeRow]) -> list[dict[str, Any]]:
    return [
        {"nodeName": n.name, "gpuType": n.gpu_type, "boundPools": [n.pool] if n.pool else [],
         "labels": {k: v for k, v in sorted(n.labels.items()) if is_gpu_label(k)}}
        for n in sorted(nodes, key=lambda n: n.name)
    ]  # fmt: skip


def labels_overview(nodes: Iterable[NodeRow]) -> dict[str, list[str]]:
    keys: dict[str, set[str]] = {}
    for n in nodes:
        for k, v in n.labels.items():
            keys.setdefault(k, set()).add(v)
    return {k: sorted(keys[k]) for k in sorted(keys)}


def check_page(page: int, page_size: int) -> None:
    if page < 1:
        raise InvalidSpec("page must be at least 1", field="page")
    if not 1 <= page_size <= 1000:
        raise InvalidSpec("pageSize must be between 1 and 1000", field="pageSize")
