"""The allocator: GPU inventory, reservations and the scheduling decision.

Indexed by pool and node with per-node aggregates, so a decision looks at the
nodes of one pool (cheap aggregate checks) and runs the filter chain only on
the GPUs of the few nodes that can win, in best-first order (branch and bound).
With diagnostics on, the same chain runs over every GPU of the pool and records
each stage, so the fast path and simulate-schedule cannot disagree.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpuplane_controller.domain.filters import (
    REASONS,
    STAGES,
    Chain,
    NodeOk,
    StageDetail,
    tflops_needed,
    vram_needed,
)
from gpuplane_controller.domain.model import Allocation, AllocRequest, Gpu, PoolConfig, Quota
from gpuplane_controller.domain.quota import NamespaceUsage, check_quota
from gpuplane_controller.domain.scoring import final_score, gpu_score, node_score
from gpuplane_core.errors import InvalidSpec

Listener = Callable[[str, Allocation, int], None]


def _always(_: str) -> bool:
    return True


@dataclass
class NodeDiagnosis:
    plugin: str
    reasons: list[str]


@dataclass
class Decision:
    """The outcome of one scheduling attempt (nothing is reserved by it)."""

    pool: str
    node: str = ""
    gpus: list[str] = field(default_factory=list)
    score: int = 0
    gpu_scores: dict[str, int] = field(default_factory=dict)
    stages: list[StageDetail] = field(default_factory=list)
    error: str = ""
    failed_filter: str = ""
    num_nodes: int = 0
    diagnosis: dict[str, NodeDiagnosis] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.gpus)


class _NodeAgg:
    """The GPUs one node contributes to one pool, with sums kept incrementally."""

    __slots__ = (
        "_cache",
        "_max_av",
        "cap_tflops",
        "cap_vram",
        "gpus",
        "name",
        "used_tflops",
        "used_vram",
        "version",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.gpus: list[Gpu] = []
        self.cap_vram = self.cap_tflops = self.used_vram = self.used_tflops = 0
        self.version = 0
        self._cache: dict[tuple[PoolConfig, int], tuple[float, float]] = {}
        self._max_av: tuple[int, int] | None = None

    def recompute(self) -> None:
        self.cap_vram = sum(g.capacity_vram for g in self.gpus)
        self.cap_tflops = sum(g.virtual_tflops_m for g in self.gpus)
        self.used_vram = sum(g.used_vram for g in self.gpus)
        self.used_tflops = sum(g.used_tflops_m for g in self.gpus)
        self._cache.clear()
        self._max_av = None
        self.version += 1

    def max_available(self) -> tuple[int, int]:
        if self._max_av is None:
            running = [g for g in self.gpus if g.phase == "Running"]
            self._max_av = (
                max((g.available_tflops_m for g in running), default=-1),
                max((g.available_vram for g in running), default=-1),
            )
        return self._max_av

    def bound(self, cfg: PoolConfig, k: int) -> tuple[float, float]:
        """Upper bound of (node score, sum of the k best GPU scores) for any request."""
        key = (cfg, k)
        b = self._cache.get(key)
        if b is None:
            scores = sorted((gpu_score(g, cfg) for g in self.gpus), reverse=True)[:k]
            ns = node_score(self.used_vram, self.cap_vram, self.used_tflops, self.cap_tflops, cfg)
            b = self._cache[key] = (ns, sum(scores))
        return b


class _BoundHeap:
    """Nodes ordered best bound first, updated incrementally as nodes change."""

    def __init__(self, cfg: PoolConfig, k: int, nodes: Iterable[_NodeAgg]) -> None:
        self.cfg, self.k = cfg, k
        self.items: list[tuple[float, float, str, int]] = []
        self.rebuild(nodes)

    def rebuild(self, nodes: Iterable[_NodeAgg]) -> None:
        self.items = [self._entry(agg) for agg in nodes]
        heapq.heapify(self.items)

    def _entry(self, agg: _NodeAgg) -> tuple[float, float, str, int]:
        ns, gs = agg.bound(self.cfg, self.k)
        return (-ns, -gs, agg.name, agg.version)

    def push(self, agg: _NodeAgg) -> None:
        heapq.heappush(self.items, self._entry(agg))


class Allocator:
    def __init__(self) -> None:
        self.gpus: dict[str, Gpu] = {}
        self.pools: dict[str, PoolConfig] = {}
        self.quotas: dict[str, Quota] = {}
        self.allocations: dict[str, Allocation] = {}
        self.revision = 0
        # gpu name -> {pod uid: reserved milli-TFLOPs}; kept for GPUs not (yet) known too.
        self._gpu_workers: dict[str, dict[str, int]] = {}
        self._node_workers: dict[str, dict[str, str]] = {}  # node -> {uid: "ns/name"}
        self._pool_nodes: dict[str, dict[str, _NodeAgg]] = {}
        # Per pool and gpu-count: a lazy max-heap of node bounds (stale entries skipped by version).
        self._heaps: dict[str, dict[int, _BoundHeap]] = {}
        self._ns_usage: dict[str, NamespaceUsage] = {}
        self.dirty_gpus: set[str] = set()
        self.listeners: list[Listener] = []

    # ---- inventory -------------------------------------------------------------------------
    def set_pool(self, cfg: PoolConfig) -> None:
        old = self.pools.get(cfg.name)
        self.pools[cfg.name] = cfg
        if old != cfg:
            self._heaps.pop(cfg.name, None)
        if old is None or old.oversell_percent != cfg.oversell_percent:
            for g in self.gpus.values():
                if g.pool == cfg.name:
                    self._apply_oversell(g)
            for agg in self._pool_nodes.get(cfg.name, {}).values():
                agg.recompute()

    def remove_pool(self, name: str) -> None:
        self.pools.pop(name, None)

    def pool_config(self, name: str) -> PoolConfig:
        return self.pools.get(name) or PoolConfig(name)

    def _apply_oversell(self, g: Gpu) -> None:
        g.virtual_tflops_m = g.capacity_tflops_m * self.pool_config(g.pool).oversell_percent // 100

    def upsert_gpu(self, gpu: Gpu) -> None:
        old = self.gpus.get(gpu.name)
        if old is not None:
            self._unindex(old)
        workers = self._gpu_workers.get(gpu.name, {})
        gpu.used_tflops_m = sum(workers.values())
        gpu.used_vram = sum(
            vram_needed(self.allocations[uid].req, gpu) for uid in workers if uid in self.allocations
        )
        self._apply_oversell(gpu)
        self.gpus[gpu.name] = gpu
        agg = self._pool_nodes.setdefault(gpu.pool, {}).setdefault(gpu.node, _NodeAgg(gpu.node))
        agg.gpus.append(gpu)
        agg.gpus.sort(key=lambda g: (g.index, g.name))
        agg.recompute()
        self._touched(gpu.pool, agg)
        self.dirty_gpus.add(gpu.name)

    def remove_gpu(self, name: str) -> None:
        old = self.gpus.pop(name, None)
        if old is not None:
            self._unindex(old)

    def _unindex(self, gpu: Gpu) -> None:
        nodes = self._pool_nodes.get(gpu.pool, {})
        agg = nodes.get(gpu.node)
        if agg is None:
            return
        agg.gpus = [g for g in agg.gpus if g.name != gpu.name]
        agg.recompute()  # bumps the version, so heap entries of a removed node go stale too
        if agg.gpus:
            self._touched(gpu.pool, agg)
        else:
            del nodes[gpu.node]
            if not nodes:
                self._pool_nodes.pop(gpu.pool, None)

    def _touched(self, pool: str, agg: _NodeAgg) -> None:
        heaps = self._heaps.get(pool)
        if not heaps:
            return
        nodes = self._pool_nodes.get(pool, {})
        for h in heaps.values():
            if len(h.items) > 2 * len(nodes) + 64:
                h.rebuild(nodes.values())  # drop the stale entries
            else:
                h.push(agg)

    def _heap(self, pool: str, cfg: PoolConfig, k: int) -> _BoundHeap:
        heaps = self._heaps.setdefault(pool, {})
        h = heaps.get(k)
        if h is None or h.cfg != cfg:
            h = heaps[k] = _BoundHeap(cfg, k, self._pool_nodes.get(pool, {}).values())
        return h

    def set_quota(self, quota: Quota) -> None:
        self.quotas[quota.namespace] = quota

    def remove_quota(self, namespace: str) -> None:
        self.quotas.pop(namespace, None)

    def pool_gpus(self, pool: str) -> list[Gpu]:
        return [g for agg in self._pool_nodes.get(pool, {}).values() for g in agg.gpus]

    def node_gpus(self, node: str) -> list[Gpu]:
        return [g for nodes in self._pool_nodes.values() if node in nodes for g in nodes[node].gpus]

    def pool_names(self) -> list[str]:
        return sorted(set(self.pools) | {p for p in self._pool_nodes if p})

    def node_workers(self) -> dict[str, dict[str, str]]:
        return self._node_workers

    def gpu_workers(self, gpu: str) -> list[Allocation]:
        return [self.allocations[uid] for uid in self._gpu_workers.get(gpu, {}) if uid in self.allocations]

    def namespace_usage(self, namespace: str) -> NamespaceUsage:
        return self._ns_usage.get(namespace) or NamespaceUsage()

    # ---- scheduling ------------------------------------------------------------------------
    def schedule(self, req: AllocRequest, node_ok: NodeOk = _always, *, diagnose: bool = False) -> Decision:
        """Filter and score without reserving. `node_ok` answers the pod's node constraints."""
        decision = Decision(pool=req.pool)
        nodes = self._pool_nodes.get(req.pool, {})
        decision.num_nodes = len(nodes)
        quota = self.quotas.get(req.pod.namespace)
        if quota is not None:
            why = check_quota(quota, self.namespace_usage(req.pod.namespace), req)
            if why:
                decision.error = f"GPUResourceQuota: {why}"
                decision.failed_filter = "GPUResourceQuota"
                decision.diagnosis = {n: NodeDiagnosis("GPUResourceQuota", [why]) for n in sorted(nodes)}
                return decision
        if not nodes:
            decision.error = f"no gpu devices in pool {req.pool}"
            return decision
        cfg = self.pool_config(req.pool)
        full = self._node_full_fn(cfg)
        if diagnose:
            self._schedule_diagnosed(req, cfg, nodes, node_ok, full, decision)
        else:
            self._schedule_fast(req, cfg, nodes, node_ok, full, decision)
        if not decision.ok and not decision.error:
            decision.error = f"no gpus available or valid in pool {req.pool} after filtering"
        return decision

    def _node_full_fn(self, cfg: PoolConfig) -> Callable[[str], bool]:
        cap = cfg.max_workers_per_node
        workers = self._node_workers
        return lambda node: len(workers.get(node, ())) >= cap

    def _pick(
        self, req: AllocRequest, cfg: PoolConfig, agg: _NodeAgg, survivors: list[Gpu]
    ) -> tuple[tuple[float, float], list[Gpu], list[float]]:
        scored = sorted(survivors, key=lambda g: (-gpu_score(g, cfg), g.index, g.name))[: req.gpu_count]
        scores = [gpu_score(g, cfg) for g in scored]
        ns = node_score(agg.used_vram, agg.cap_vram, agg.used_tflops, agg.cap_tflops, cfg)
        return (ns, sum(scores)), scored, scores

    def _schedule_fast(
        self,
        req: AllocRequest,
        cfg: PoolConfig,
        nodes: dict[str, _NodeAgg],
        node_ok: NodeOk,
        full: Callable[[str], bool],
        decision: Decision,
    ) -> None:
        """Visit nodes best bound first; stop once no remaining node can beat the best found."""
        k = req.gpu_count
        need_v = 0 if req.dedicated_gpu else req.request.vram
        need_t = 0 if (req.dedicated_gpu or req.request.percent_m) else req.request.tflops_m
        heap = self._heap(req.pool, cfg, k).items
        chain = Chain(req, node_ok, full)
        popped: list[tuple[float, float, str, int]] = []
        best: tuple[tuple[float, float], str, list[Gpu], list[float]] | None = None
        try:
            while heap:
                entry = heapq.heappop(heap)
                nns, ngs, name, version = entry
                agg = nodes.get(name)
                if agg is None or agg.version != version:
                    continue  # stale entry: the node changed since it was pushed
                popped.append(entry)
                bound = (-nns, -ngs)
                if best is not None and (best[0] > bound or (best[0] == bound and best[1] < name)):
                    break
                av_t, av_v = agg.max_available()
                if av_t < need_t or av_v < need_v or len(agg.gpus) < k or not node_ok(name):
                    continue
                if best is not None and k == 1:
                    # Tighter bound from the GPUs that have room: skips the chain for nodes that cannot win.
                    tight = max(
                        (
                            gpu_score(g, cfg)
                            for g in agg.gpus
                            if g.virtual_tflops_m - g.used_tflops_m >= need_t
                            and g.capacity_vram - g.used_vram >= need_v
                        ),
                        default=None,
                    )
                    if (
                        tight is None
                        or (-nns, tight) < best[0]
                        or ((-nns, tight) == best[0] and name > best[1])
                    ):
                        continue
                survivors = chain.run(agg.gpus).survivors
                if len(survivors) < k:
                    continue
                value, picked, scores = self._pick(req, cfg, agg, survivors)
                if best is None or value > best[0] or (value == best[0] and name < best[1]):
                    best = (value, name, picked, scores)
        finally:
            for entry in popped:
                heapq.heappush(heap, entry)
        if best is not None:
            self._fill(decision, best[1], best[2], best[3], best[0])

    def _schedule_diagnosed(
        self,
        req: AllocRequest,
        cfg: PoolConfig,
        nodes: dict[str, _NodeAgg],
        node_ok: NodeOk,
        full: Callable[[str], bool],
        decision: Decision,
    ) -> None:
        gpus = [g for agg in nodes.values() for g in agg.gpus]
        chain = Chain(req, node_ok, full).run(gpus, diagnose=True)
        decision.stages = chain.stages
        by_node: dict[str, list[Gpu]] = {}
        for g in chain.survivors:
            by_node.setdefault(g.node, []).append(g)
        best: tuple[tuple[float, float], str, list[Gpu], list[float]] | None = None
        k = req.gpu_count
        ranked = sorted(by_node, key=lambda n: (tuple(-x for x in nodes[n].bound(cfg, k)), n))
        for name in ranked:
            bound = nodes[name].bound(cfg, k)
            if best is not None and (best[0] > bound or (best[0] == bound and best[1] < name)):
                break
            value, picked, scores = self._pick(req, cfg, nodes[name], by_node[name])
            if best is None or value > best[0] or (value == best[0] and name < best[1]):
                best = (value, name, picked, scores)
        if best is not None:
            self._fill(decision, best[1], best[2], best[3], best[0])
            return
        order = {s: i for i, s in enumerate(STAGES)}
        for stage in chain.stages:
            if not stage.after:
                decision.failed_filter = stage.name
                break
        for name, agg in sorted(nodes.items()):
            last = max(
                (chain.removed_by.get(g.name, "SameNodeFilter") for g in agg.gpus), key=order.__getitem__
            )
            decision.diagnosis[name] = NodeDiagnosis(last, [REASONS[last]])
        failed = next(s for s in chain.stages if s.name == decision.failed_filter)
        decision.error = (
            f"no gpus available or valid in pool {req.pool} after filtering: {failed.name} removed "
            f"{failed.diff} of {len(failed.before)} gpus ({REASONS[failed.name]})"
        )

    def _fill(
        self,
        decision: Decision,
        node: str,
        picked: list[Gpu],
        scores: list[float],
        value: tuple[float, float],
    ) -> None:
        decision.node = node
        decision.gpus = [g.name for g in picked]
        decision.gpu_scores = {g.name: final_score(s) for g, s in zip(picked, scores, strict=True)}
        decision.score = final_score(value[0] if value[0] else value[1] / max(1, len(picked)))

    # ---- reservations ----------------------------------------------------------------------
    def reserve(self, req: AllocRequest, node: str, gpu_names: Iterable[str]) -> Allocation:
        """Record an allocation (a decision, or one rebuilt from pod annotations). Idempotent by pod UID."""
        existing = self.allocations.get(req.pod.uid)
        if existing is not None:
            return existing
        names = tuple(gpu_names)
        if len(set(names)) != len(names):
            raise InvalidSpec("the same gpu is listed twice", field="tensor-fusion.ai/gpu-ids")
        per_gpu: list[int] = []
        for name in names:
            g = self.gpus.get(name)
            per_gpu.append(tflops_needed(req, g) if g is not None else req.request.tflops_m)
        alloc = Allocation(req=req, node=node, gpus=names, tflops_m=tuple(per_gpu))
        self.allocations[req.pod.uid] = alloc
        for name, t in zip(names, per_gpu, strict=True):
            self._gpu_workers.setdefault(name, {})[req.pod.uid] = t
            self._adjust(name, t, req, +1)
        self._node_workers.setdefault(node, {})[req.pod.uid] = f"{req.pod.namespace}/{req.pod.name}"
        self._ns_usage.setdefault(req.pod.namespace, NamespaceUsage()).add(req, +1)
        self._emit("ADDED", alloc)
        return alloc

    def release(self, uid: str) -> Allocation | None:
        alloc = self.allocations.pop(uid, None)
        if alloc is None:
            return None
        for name, t in zip(alloc.gpus, alloc.tflops_m, strict=True):
            workers = self._gpu_workers.get(name, {})
            workers.pop(uid, None)
            if not workers:
                self._gpu_workers.pop(name, None)
            self._adjust(name, t, alloc.req, -1)
        node = self._node_workers.get(alloc.node, {})
        node.pop(uid, None)
        if not node:
            self._node_workers.pop(alloc.node, None)
        self._ns_usage[alloc.req.pod.namespace].add(alloc.req, -1)
        self._emit("DELETED", alloc)
        return alloc

    def _adjust(self, name: str, tflops_m: int, req: AllocRequest, sign: int) -> None:
        g = self.gpus.get(name)
        if g is None:
            return
        g.used_tflops_m += sign * tflops_m
        g.used_vram += sign * vram_needed(req, g)
        agg = self._pool_nodes[g.pool][g.node]
        agg.recompute()
        self._touched(g.pool, agg)
        self.dirty_gpus.add(name)

    def _emit(self, kind: str, alloc: Allocation) -> None:
        self.revision += 1
        for listener in list(self.listeners):
            listener(kind, alloc, self.revision)
