"""The controller's in-memory view of the cluster: the allocator plus the node,
pool and GPU-object caches it needs, and the conversions from Kubernetes
objects (camelCase dicts) into domain values. No I/O here."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpuplane_controller.domain.allocator import Allocator, Decision
from gpuplane_controller.domain.model import DEFAULT_MAX_WORKERS_PER_NODE, STRATEGIES, Gpu, PoolConfig, Quota
from gpuplane_controller.domain.nodematch import NodeInfo, pod_fits_node, selector_terms_match
from gpuplane_controller.domain.podrequest import SCHEDULER_NAME, parse_request
from gpuplane_core.errors import GpuplaneError, InvalidSpec
from gpuplane_core.quantity import format_quantity, to_bytes, to_milli

POOL_LABEL = "tensor-fusion.ai/gpupool"
RUNWHERE_POOL_LABEL = "runwhere.ai/pool"
DEFAULT_POOL_ANNOTATION = "tensor-fusion.ai/is-default-pool"


class SchedulerNotFound(InvalidSpec):
    """spec.schedulerName is not a profile this controller serves (HTTP answers 500, as TensorFusion)."""


def _opt(fn: Callable[[Any], int], value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        return fn(value)
    except GpuplaneError:
        return None


def fmt_tflops(milli: int) -> str:
    return format_quantity(Decimal(milli) / 1000)


def fmt_vram(b: int) -> str:
    return format_quantity(b, binary=True)


def node_info(node: dict[str, Any]) -> NodeInfo:
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    taints = tuple(
        (t.get("key", ""), t.get("value") or "", t.get("effect", "")) for t in spec.get("taints") or []
    )
    return NodeInfo(
        meta["name"], dict(meta.get("labels") or {}), taints, ready, bool(spec.get("unschedulable"))
    )


def _node_of(obj: dict[str, Any]) -> str:
    status, labels = obj.get("status") or {}, (obj.get("metadata") or {}).get("labels") or {}
    return str(
        (status.get("nodeSelector") or {}).get("kubernetes.io/hostname")
        or labels.get("tensor-fusion.ai/node")
        or ""
    )


@dataclass
class PoolObj:
    name: str
    terms: list[dict[str, Any]]
    is_default: bool
    template: str
    oversell: int


@dataclass
class ClusterState:
    allocator: Allocator = field(default_factory=Allocator)
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    pools: dict[str, PoolObj] = field(default_factory=dict)
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    gpu_objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodes_version: int = 0
    gpu_objects_by_node: dict[str, set[str]] = field(default_factory=dict)
    _fit_cache: dict[str, tuple[int, dict[str, bool]]] = field(default_factory=dict)
    # Cluster-wide scoring defaults from the dynamic config; a template's own weights win.
    default_weights: tuple[float, float] = (0.7, 0.3)
    default_max_workers_per_node: int = DEFAULT_MAX_WORKERS_PER_NODE

    # ---- nodes --------------------------------------------------------------------------------
    def upsert_node(self, obj: dict[str, Any]) -> bool:
        """True when something the scheduler cares about changed (not a mere heartbeat)."""
        info = node_info(obj)
        if self.nodes.get(info.name) == info:
            return False
        self.nodes[info.name] = info
        self.nodes_version += 1
        self._repool_node(info.name)
        return True

    def remove_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self.nodes_version += 1

    def node_ok_for(self, spec: dict[str, Any]) -> Callable[[str], bool]:
        """The pod's node predicate, memoised per constraint signature until nodes change."""
        sig = json.dumps(
            [spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations")],
            sort_keys=True,
            default=str,
        )
        entry = self._fit_cache.get(sig)
        if entry is None or entry[0] != self.nodes_version:
            if len(self._fit_cache) > 1024:
                self._fit_cache.clear()
            entry = self._fit_cache[sig] = (self.nodes_version, {})
        memo, nodes = entry[1], self.nodes

        def ok(name: str) -> bool:
            r = memo.get(name)
            if r is None:
                node = nodes.get(name)
                r = memo[name] = node is not None and pod_fits_node(spec, node)
            return r

        return ok

    # ---- pools, templates, quotas ------------------------------------------------------------
    def upsert_pool(self, obj: dict[str, Any]) -> None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        ratio = ((spec.get("capacityConfig") or {}).get("oversubscription") or {}).get("tflopsOversellRatio")
        oversell = int(ratio) if isinstance(ratio, int | float) and ratio >= 100 else 100
        self.pools[meta["name"]] = PoolObj(
            name=meta["name"],
            terms=((spec.get("nodeManagerConfig") or {}).get("nodeSelector") or {}).get("nodeSelectorTerms")
            or [],
            is_default=(meta.get("annotations") or {}).get(DEFAULT_POOL_ANNOTATION) == "true",
            template=spec.get("schedulingConfigTemplate") or "",
            oversell=oversell,
        )
        self._refresh_pool_config(meta["name"])
        self.repool_all()

    def remove_pool(self, name: str) -> None:
        self.pools.pop(name, None)
        self.allocator.remove_pool(name)
        self.repool_all()

    def upsert_template(self, obj: dict[str, Any]) -> None:
        self.templates[obj["metadata"]["name"]] = obj.get("spec") or {}
        for p in self.pools.values():
            self._refresh_pool_config(p.name)

    def remove_template(self, name: str) -> None:
        self.templates.pop(name, None)
        for p in self.pools.values():
            self._refresh_pool_config(p.name)

    def _refresh_pool_config(self, name: str) -> None:
        pool = self.pools[name]
        placement = (self.templates.get(pool.template) or {}).get("placement") or {}
        mode = placement.get("mode") if placement.get("mode") in STRATEGIES else "NodeCompactGPULowLoad"
        vw, tw = self.default_weights
        # Weights ride in a gpuFilters entry, the template's free-form extension point.
        for f in placement.get("gpuFilters") or []:
            if f.get("type") == "scoreWeights":
                params = f.get("params") or {}
                vw = float(params.get("vramWeight", vw))
                tw = float(params.get("tflopsWeight", tw))
        self.allocator.set_pool(
            PoolConfig(
                name,
                oversell_percent=pool.oversell,
                strategy=mode,
                vram_weight=vw,
                tflops_weight=tw,
                max_workers_per_node=self.default_max_workers_per_node,
            )
        )

    def set_scheduler_defaults(self, vram_weight: float, tflops_weight: float, max_workers: int) -> None:
        """Dynamic config changed: every pool picks up the new defaults (templates still win)."""
        self.default_weights = (vram_weight, tflops_weight)
        self.default_max_workers_per_node = max_workers
        for name in self.pools:
            self._refresh_pool_config(name)

    def upsert_quota(self, obj: dict[str, Any]) -> None:
        spec = obj.get("spec") or {}
        total, single = spec.get("total") or {}, spec.get("single") or {}
        tr, tl = total.get("requests") or {}, total.get("limits") or {}
        sr, sl = single.get("maxRequests") or {}, single.get("maxLimits") or {}
        self.allocator.set_quota(
            Quota(
                namespace=obj["metadata"]["namespace"],
                total_tflops_m=_opt(to_milli, tr.get("tflops")),
                total_vram=_opt(to_bytes, tr.get("vram")),
                total_limit_tflops_m=_opt(to_milli, tl.get("tflops")),
                total_limit_vram=_opt(to_bytes, tl.get("vram")),
                max_workers=total.get("maxWorkers"),
                single_max_tflops_m=_opt(to_milli, sr.get("tflops")),
                single_max_vram=_opt(to_bytes, sr.get("vram")),
                single_max_limit_tflops_m=_opt(to_milli, sl.get("tflops")),
                single_max_limit_vram=_opt(to_bytes, sl.get("vram")),
                single_max_gpu_count=single.get("maxGPUCount"),
            )
        )

    # ---- GPUs ---------------------------------------------------------------------------------
    def _pool_of(self, labels: dict[str, str], node: str) -> str:
        if labels.get(POOL_LABEL):
            return labels[POOL_LABEL]
        info = self.nodes.get(node)
        if info is None:
            return ""
        for name in sorted(self.pools):
            if selector_terms_match(self.pools[name].terms, info):
                return name
        # Nodes pooled by label only (gpuctl pools are `runwhere.ai/pool=<name>` node labels).
        return info.labels.get(POOL_LABEL) or info.labels.get(RUNWHERE_POOL_LABEL) or ""

    def upsert_gpu_object(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        self.gpu_objects[name] = obj
        self.gpu_objects_by_node.setdefault(_node_of(obj), set()).add(name)
        gpu = self._gpu_from(obj)
        if gpu is not None:
            self.allocator.upsert_gpu(gpu)
        else:
            self.allocator.remove_gpu(obj["metadata"]["name"])

    def remove_gpu_object(self, name: str) -> None:
        obj = self.gpu_objects.pop(name, None)
        if obj is not None:
            self.gpu_objects_by_node.get(_node_of(obj), set()).discard(name)
        self.allocator.remove_gpu(name)

    def _gpu_from(self, obj: dict[str, Any]) -> Gpu | None:
        meta, status = obj["metadata"], obj.get("status") or {}
        labels = meta.get("labels") or {}
        node = (status.get("nodeSelector") or {}).get("kubernetes.io/hostname") or labels.get(
            "tensor-fusion.ai/node"
        )
        cap = status.get("capacity") or {}
        if not node or not cap:
            return None  # not reported yet: nothing to schedule on
        return Gpu(
            name=meta["name"],
            node=node,
            pool=self._pool_of(labels, node),
            phase=status.get("phase") or "Pending",
            vendor=status.get("vendor") or "",
            model=status.get("model") or "",
            uuid=status.get("uuid") or meta["name"],
            index=int(status.get("index") or 0),
            numa_node=int(status.get("numaNode") if status.get("numaNode") is not None else -1),
            isolation_mode=status.get("isolationMode") or "",
            capacity_tflops_m=_opt(to_milli, cap.get("tflops")) or 0,
            capacity_vram=_opt(to_bytes, cap.get("vram")) or 0,
            labels=dict(labels),
        )

    def _repool_node(self, node: str) -> None:
        for name, obj in self.gpu_objects.items():
            g = self.allocator.gpus.get(name)
            if (g is not None and g.node == node) or g is None:
                self.upsert_gpu_object(obj)

    def repool_all(self) -> None:
        for obj in list(self.gpu_objects.values()):
            self.upsert_gpu_object(obj)

    # ---- requests -----------------------------------------------------------------------------
    def default_pool(self) -> str:
        defaults = sorted(n for n, p in self.pools.items() if p.is_default)
        if defaults:
            return defaults[0]
        names = self.allocator.pool_names()
        unpooled = bool(self.allocator.pool_gpus(""))
        if len(names) == 1 and not unpooled:
            return names[0]
        if unpooled:
            return ""  # GPUs on nodes that belong to no pool
        raise InvalidSpec(
            "annotation tensor-fusion.ai/gpupool is required: there is no single default GPU pool",
            field="tensor-fusion.ai/gpupool",
        )

    def simulate(self, pod: Any) -> Decision:
        """Filter and score a pod manifest with diagnostics; never reserves."""
        if not isinstance(pod, dict) or pod.get("kind") != "Pod" or not isinstance(pod.get("spec"), dict):
            raise InvalidSpec("request body is not a Pod manifest (kind: Pod with a spec)", field="kind")
        if not isinstance(pod.get("metadata") or {}, dict):
            raise InvalidSpec("metadata must be an object", field="metadata")
        name = pod["spec"].get("schedulerName") or "default-scheduler"
        if name != SCHEDULER_NAME:
            raise SchedulerNotFound(
                "scheduler framework not found", code="scheduler_not_found", field="spec.schedulerName"
            )
        req = parse_request(pod, self.default_pool)
        return self.allocator.schedule(req, self.node_ok_for(pod["spec"]), diagnose=True)
