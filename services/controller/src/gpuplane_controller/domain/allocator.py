"""The allocator: GPU inventory, reservations and the scheduling decision.

Indexed by pool, so a decision never runs the filter chain over every GPU:
- one-GPU requests (the common case) ask the pool's FitIndex (fitindex.py), a
  grid of available-TFLOPs x available-VRAM cells whose heaps hold the GPUs in
  ranking order, so the fullest GPUs a request no longer fits are never visited;
- multi-GPU requests (and one-GPU requests whose filters reject too many index
  candidates) visit nodes best bound first with per-node aggregates and a cached
  ranked view of each node's GPUs (branch and bound).
Changed nodes are queued and applied to an index at its next query.
With diagnostics on, the chain runs over every GPU of the pool and records each
stage; the choice itself is the fast path's, so the two cannot disagree.
"""

from __future__ import annotations

import heapq
import itertools
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
from gpuplane_controller.domain.fitindex import Fallback, FitIndex
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


_versions = itertools.count(1)


class _NodeAgg:
    """The GPUs one node contributes to one pool, with sums kept incrementally."""

    __slots__ = (
        "_view",
        "_view_cfg",
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
        self._view: tuple[float, list[tuple[float, Gpu]]] | None = None
        self._view_cfg: PoolConfig | None = None

    def recompute(self) -> None:
        self.cap_vram = sum(g.capacity_vram for g in self.gpus)
        self.cap_tflops = sum(g.virtual_tflops_m for g in self.gpus)
        self.used_vram = sum(g.used_vram for g in self.gpus)
        self.used_tflops = sum(g.used_tflops_m for g in self.gpus)
        self.changed()

    def changed(self) -> None:
        # Versions are global so a node removed and added again never matches an old heap entry.
        self.version = next(_versions)
        self._view = None

    def view(self, cfg: PoolConfig) -> tuple[float, list[tuple[float, Gpu]]]:
        """(node score, [(GPU score, GPU)] best first: by -score, index, name), cached per version."""
        v = self._view
        if v is None or (self._view_cfg is not cfg and self._view_cfg != cfg):
            ns = node_score(self.used_vram, self.cap_vram, self.used_tflops, self.cap_tflops, cfg)
            scored = [(gpu_score(g, cfg), g) for g in self.gpus]
            scored.sort(key=lambda e: (-e[0], e[1].index, e[1].name))
            v = self._view = (ns, scored)
            self._view_cfg = cfg
        return v

    def bound(self, cfg: PoolConfig, k: int) -> tuple[float, float]:
        """Upper bound of (node score, sum of the k best GPU scores) for any request."""
        ns, scored = self.view(cfg)
        return ns, sum(s for s, _ in scored[:k])


class _BoundHeap:
    """Nodes ordered best bound first; changed nodes are queued and re-pushed at the next query."""

    def __init__(self, cfg: PoolConfig, k: int, nodes: Iterable[_NodeAgg]) -> None:
        self.cfg, self.k = cfg, k
        self.items: list[tuple[float, float, str, int]] = []
        self.pending: set[str] = set()
        self.rebuild(nodes)

    def rebuild(self, nodes: Iterable[_NodeAgg]) -> None:
        self.items = [self._entry(agg) for agg in nodes]
        heapq.heapify(self.items)
        self.pending.clear()

    def _entry(self, agg: _NodeAgg) -> tuple[float, float, str, int]:
        ns, gs = agg.bound(self.cfg, self.k)
        return (-ns, -gs, agg.name, agg.version)

    def sync(self, nodes: dict[str, _NodeAgg]) -> None:
        if not self.pending:
            return
        if len(self.items) + len(self.pending) > 2 * len(nodes) + 64:
            self.rebuild(nodes.values())  # drop the stale entries
            return
        for name in self.pending:
            agg = nodes.get(name)
            if agg is not None:
                heapq.heappush(self.items, self._entry(agg))
        self.pending.clear()


# Candidates the one-GPU index may reject before the node-by-node search takes over (a pod whose
# node constraints or GPU filters exclude most of the pool is better served node by node).
FIT_BUDGET = 64


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
        # pool -> (GPUs, names) node by node, cached until membership changes.
        self._pool_lists: dict[str, tuple[list[Gpu], list[str]]] = {}
        # Per pool and gpu-count: a lazy max-heap of node bounds (stale entries skipped by version).
        self._heaps: dict[str, dict[int, _BoundHeap]] = {}
        # Per pool: the one-GPU index (built at the first one-GPU request of the pool).
        self._fit: dict[str, FitIndex] = {}
        self._ns_usage: dict[str, NamespaceUsage] = {}
        self.dirty_gpus: set[str] = set()
        self.listeners: list[Listener] = []

    # ---- inventory -------------------------------------------------------------------------
    def set_pool(self, cfg: PoolConfig) -> None:
        old = self.pools.get(cfg.name)
        self.pools[cfg.name] = cfg
        if old != cfg:
            self._heaps.pop(cfg.name, None)
            self._fit.pop(cfg.name, None)
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
        self._pool_lists.pop(gpu.pool, None)
        self._touched(gpu.pool, agg)
        self.dirty_gpus.add(gpu.name)

    def remove_gpu(self, name: str) -> None:
        old = self.gpus.pop(name, None)
        if old is not None:
            self._unindex(old)

    def _unindex(self, gpu: Gpu) -> None:
        self._pool_lists.pop(gpu.pool, None)
        fit = self._fit.get(gpu.pool)
        if fit is not None:
            fit.drop(gpu.name)
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
        """Queue a changed node for the pool's indexes (applied at their next query)."""
        heaps = self._heaps.get(pool)
        if heaps:
            for h in heaps.values():
                h.pending.add(agg.name)
        fit = self._fit.get(pool)
        if fit is not None:
            fit.pending.add(agg.name)

    def _heap(self, pool: str, cfg: PoolConfig, k: int) -> _BoundHeap:
        heaps = self._heaps.setdefault(pool, {})
        nodes = self._pool_nodes.get(pool, {})
        h = heaps.get(k)
        if h is None or h.cfg != cfg:
            h = heaps[k] = _BoundHeap(cfg, k, nodes.values())
        else:
            h.sync(nodes)
        return h

    def _fit_index(self, pool: str, cfg: PoolConfig) -> FitIndex:
        nodes = self._pool_nodes.get(pool, {})
        fit = self._fit.get(pool)
        if fit is None or fit.cfg != cfg:
            fit = self._fit[pool] = FitIndex(cfg)
            names: Iterable[str] = nodes
        else:
            names, fit.pending = fit.pending, set()
        for name in names:
            agg = nodes.get(name)
            if agg is not None:
                ns, scored = agg.view(cfg)
                for score, g in scored:
                    fit.put(g, ns, score)
        return fit

    def set_quota(self, quota: Quota) -> None:
        self.quotas[quota.namespace] = quota

    def remove_quota(self, namespace: str) -> None:
        self.quotas.pop(namespace, None)

    def pool_gpus(self, pool: str) -> list[Gpu]:
        """The pool's GPUs, node by node (a fresh list: callers may keep or change it)."""
        return list(self._pool_list(pool)[0])

    def _pool_list(self, pool: str) -> tuple[list[Gpu], list[str]]:
        """The pool's GPUs node by node and their names; cached, never to be changed by callers."""
        cached = self._pool_lists.get(pool)
        if cached is None:
            gpus = [g for agg in self._pool_nodes.get(pool, {}).values() for g in agg.gpus]
            cached = self._pool_lists[pool] = (gpus, [g.name for g in gpus])
        return cached

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
            self._schedule_fast(req, cfg, nodes, Chain(req, node_ok, full), decision)
        if not decision.ok and not decision.error:
            decision.error = f"no gpus available or valid in pool {req.pool} after filtering"
        return decision

    def _node_full_fn(self, cfg: PoolConfig) -> Callable[[str], bool]:
        cap = cfg.max_workers_per_node
        workers = self._node_workers
        return lambda node: len(workers.get(node, ())) >= cap

    def _schedule_fast(
        self, req: AllocRequest, cfg: PoolConfig, nodes: dict[str, _NodeAgg], chain: Chain, decision: Decision
    ) -> None:
        # Lower bounds of what a GPU that passes GPUResourceFilter has available.
        need_v = 0 if req.dedicated_gpu else req.request.vram
        need_t = 0 if (req.dedicated_gpu or req.request.percent_m) else req.request.tflops_m
        if req.gpu_count == 1:
            try:
                e = self._fit_index(req.pool, cfg).best(need_t, need_v, chain.accepts, FIT_BUDGET)
            except Fallback:
                pass
            else:
                if e is not None:
                    self._fill(decision, e[2], [e[6]], [-e[1]], (-e[0], -e[1]))
                return
        self._schedule_nodes(req, cfg, nodes, chain, need_t, need_v, decision)

    def _schedule_nodes(
        self,
        req: AllocRequest,
        cfg: PoolConfig,
        nodes: dict[str, _NodeAgg],
        chain: Chain,
        need_t: int,
        need_v: int,
        decision: Decision,
    ) -> None:
        """Visit nodes best bound first; stop once no remaining node can beat the best found."""
        k = req.gpu_count
        heap = self._heap(req.pool, cfg, k).items
        accepts, node_pass = chain.accepts, chain.node_pass
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
                if len(agg.gpus) < k or not node_pass(name):
                    continue
                ns, scored = agg.view(cfg)
                # The k best GPUs that pass every filter, in the order the pick uses.
                picked: list[Gpu] = []
                scores: list[float] = []
                for s, g in scored:
                    if (
                        g.virtual_tflops_m - g.used_tflops_m >= need_t
                        and g.capacity_vram - g.used_vram >= need_v
                        and accepts(g)
                    ):
                        picked.append(g)
                        scores.append(s)
                        if len(picked) == k:
                            break
                if len(picked) < k:
                    continue
                value = (ns, sum(scores))
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
        chain = Chain(req, node_ok, full)
        gpus, names = self._pool_list(req.pool)
        result = chain.run(gpus, diagnose=True, names=names)
        decision.stages = result.stages
        if result.survivors:
            # The survivors are what the fast path filters to, so its (exact) choice is the answer.
            self._schedule_fast(req, cfg, nodes, chain, decision)
            return
        order = {s: i for i, s in enumerate(STAGES)}
        for stage in result.stages:
            if not stage.after:
                decision.failed_filter = stage.name
                break
        removed_by = result.removed_by
        for name, agg in sorted(nodes.items()):
            last = max((removed_by.get(g.name, "SameNodeFilter") for g in agg.gpus), key=order.__getitem__)
            decision.diagnosis[name] = NodeDiagnosis(last, [REASONS[last]])
        failed = next(s for s in result.stages if s.name == decision.failed_filter)
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
        dt, dv = sign * tflops_m, sign * vram_needed(req, g)
        g.used_tflops_m += dt
        g.used_vram += dv
        agg = self._pool_nodes[g.pool][g.node]
        agg.used_tflops += dt  # the sums are exact integers: adjusting equals re-summing
        agg.used_vram += dv
        agg.changed()
        self._touched(g.pool, agg)
        self.dirty_gpus.add(name)

    def _emit(self, kind: str, alloc: Allocation) -> None:
        self.revision += 1
        for listener in list(self.listeners):
            listener(kind, alloc, self.revision)
