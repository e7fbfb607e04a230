"""Node expansion planning (the `-enable-auto-expander` node scaler), pure.

Sizing rule, kept simple on purpose: a new node is a copy of an existing node of the same
pool (the pool's node with the most GPUs first; other distinct shapes are tried when the
first cannot hold a pod, e.g. another GPU model). Pending pods are first packed into the
GPUs of nodes already claimed and not yet Ready (in-flight claims), and only what does not
fit there opens new claims, so a burst of pending pods never yields a claim per pod and a
claim in flight is waited for. Per pool a cap on claims in flight and the pool's
`capacityConfig.maxResources` bound the expansion.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuShape:
    model: str
    vendor: str
    capacity_tflops_m: int
    virtual_tflops_m: int  # with the pool's TFLOPs oversell applied
    vram: int


@dataclass(frozen=True)
class NodeTemplate:
    template_node: str
    gpus: tuple[GpuShape, ...]

    @property
    def capacity_tflops_m(self) -> int:
        return sum(g.capacity_tflops_m for g in self.gpus)

    @property
    def vram(self) -> int:
        return sum(g.vram for g in self.gpus)


@dataclass(frozen=True)
class Demand:
    """One unschedulable pod's ask, per GPU."""

    key: str  # namespace/name
    pool: str
    gpu_count: int = 1
    tflops_m: int = 0
    percent_m: int = 0  # compute percent (milli-percent) instead of TFLOPs
    vram: int = 0
    model: str = ""
    vendor: str = ""
    whole_gpu: bool = False  # dedicated-gpu or shared isolation: an idle GPU each

    @property
    def size(self) -> tuple[int, int, int]:
        return (self.gpu_count, self.vram, self.tflops_m + self.percent_m)


@dataclass(frozen=True)
class InFlightClaim:
    name: str
    pool: str
    gpus: tuple[GpuShape, ...]


@dataclass(frozen=True)
class PoolLimits:
    max_inflight_claims: int
    current_tflops_m: int = 0
    current_vram: int = 0
    max_tflops_m: int | None = None
    max_vram: int | None = None


@dataclass
class NewClaim:
    pool: str
    template: NodeTemplate
    pods: list[str] = field(default_factory=list)


@dataclass
class Plan:
    assigned: dict[str, str] = field(default_factory=dict)  # pod key -> claim (in-flight name or new-N)
    new_claims: list[NewClaim] = field(default_factory=list)
    unfit: dict[str, str] = field(default_factory=dict)  # pod key -> why no claim covers it


class _Bin:
    """The free capacity of one planned node: per GPU [free TFLOPs, free VRAM, untouched]."""

    def __init__(self, name: str, gpus: Iterable[GpuShape]) -> None:
        self.name = name
        self.gpus = list(gpus)
        self.free = [[g.virtual_tflops_m, g.vram, True] for g in self.gpus]

    def place(self, d: Demand) -> bool:
        picked: list[tuple[int, int, int]] = []
        for i, (g, free) in enumerate(zip(self.gpus, self.free, strict=True)):
            if d.model and g.model.lower() != d.model.lower():
                continue
            if d.vendor and g.vendor.lower() != d.vendor.lower():
                continue
            if d.whole_gpu:
                need_t, need_v = g.virtual_tflops_m, g.vram
                if not free[2]:
                    continue
            else:
                need_t = g.capacity_tflops_m * d.percent_m // 100_000 if d.percent_m else d.tflops_m
                need_v = d.vram
            if int(free[0]) >= need_t and int(free[1]) >= need_v:
                picked.append((i, need_t, need_v))
                if len(picked) == d.gpu_count:
                    break
        if len(picked) < d.gpu_count:
            return False
        for i, t, v in picked:
            f = self.free[i]
            f[0], f[1], f[2] = int(f[0]) - t, int(f[1]) - v, False
        return True


def choose_templates(nodes: dict[str, list[GpuShape]]) -> list[NodeTemplate]:
    """The pool's distinct node shapes, most GPUs (then most TFLOPs, then name) first."""
    seen: set[tuple[GpuShape, ...]] = set()
    out: list[NodeTemplate] = []
    order = sorted(
        nodes.items(), key=lambda kv: (-len(kv[1]), -sum(g.capacity_tflops_m for g in kv[1]), kv[0])
    )
    for node, gpus in order:
        shape = tuple(sorted(gpus, key=lambda g: (g.model, g.vendor, g.capacity_tflops_m, g.vram)))
        if gpus and shape not in seen:
            seen.add(shape)
            out.append(NodeTemplate(node, shape))
    return out


def plan_expansion(
    demands: Iterable[Demand],
    templates: dict[str, list[NodeTemplate]],
    inflight: Iterable[InFlightClaim],
    limits: dict[str, PoolLimits],
) -> Plan:
    """Which in-flight claim covers each pending pod, and which new claims to create."""
    plan = Plan()
    bins: dict[str, list[_Bin]] = {}
    claims_in_flight: dict[str, int] = {}
    added_t: dict[str, int] = {}
    added_v: dict[str, int] = {}
    for c in inflight:
        bins.setdefault(c.pool, []).append(_Bin(c.name, c.gpus))
        claims_in_flight[c.pool] = claims_in_flight.get(c.pool, 0) + 1
        added_t[c.pool] = added_t.get(c.pool, 0) + sum(g.capacity_tflops_m for g in c.gpus)
        added_v[c.pool] = added_v.get(c.pool, 0) + sum(g.vram for g in c.gpus)
    new_by_bin: dict[str, NewClaim] = {}
    # Biggest first: the packing wastes less, and the order is deterministic.
    for d in sorted(demands, key=lambda d: (tuple(-x for x in d.size), d.key)):
        pool_bins = bins.setdefault(d.pool, [])
        hit = next((b for b in pool_bins if b.place(d)), None)
        if hit is not None:
            plan.assigned[d.key] = hit.name
            if hit.name in new_by_bin:
                new_by_bin[hit.name].pods.append(d.key)
            continue
        candidates = templates.get(d.pool) or []
        if not candidates:
            plan.unfit[d.key] = f"pool {d.pool} has no GPU node to copy the shape of a new node from"
            continue
        fresh: _Bin | None = None
        tpl: NodeTemplate | None = None
        for t in candidates:
            b = _Bin(f"new-{len(plan.new_claims)}", t.gpus)
            if b.place(d):
                fresh, tpl = b, t
                break
        if fresh is None or tpl is None:
            plan.unfit[d.key] = f"the request does not fit on an empty node of pool {d.pool}"
            continue
        lim = limits.get(d.pool)
        if lim is not None:
            if claims_in_flight.get(d.pool, 0) >= lim.max_inflight_claims:
                plan.unfit[d.key] = (
                    f"pool {d.pool} already has {lim.max_inflight_claims} node claims in flight; waiting"
                )
                continue
            t_total = lim.current_tflops_m + added_t.get(d.pool, 0) + tpl.capacity_tflops_m
            v_total = lim.current_vram + added_v.get(d.pool, 0) + tpl.vram
            if (lim.max_tflops_m is not None and t_total > lim.max_tflops_m) or (
                lim.max_vram is not None and v_total > lim.max_vram
            ):
                plan.unfit[d.key] = f"a new node would exceed pool {d.pool} capacityConfig.maxResources"
                continue
        claims_in_flight[d.pool] = claims_in_flight.get(d.pool, 0) + 1
        added_t[d.pool] = added_t.get(d.pool, 0) + tpl.capacity_tflops_m
        added_v[d.pool] = added_v.get(d.pool, 0) + tpl.vram
        claim = NewClaim(d.pool, tpl, [d.key])
        plan.new_claims.append(claim)
        new_by_bin[fresh.name] = claim
        pool_bins.append(fresh)
        plan.assigned[d.key] = fresh.name
    return plan
