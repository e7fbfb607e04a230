"""The GPU filter chain, in TensorFusion's stage order. Every stage narrows a
list of candidate GPUs; with diagnostics on, each stage records what it removed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuplane_controller.domain.model import AllocRequest, Gpu

STAGES = (
    "PhaseFilter",
    "GPUIndexFilter",
    "GPUIsolationModeFilter",
    "SharedWholeGPUFilter",
    "PartitionTemplateFilter",
    "GPUResourceFilter",
    "GPUModelFilter",
    "GPUVendorFilter",
    "NodeAffinityFilter",
    "SameNodeFilter",
)

REASONS = {
    "PhaseFilter": "gpu is not Running",
    "GPUIndexFilter": "gpu index not in tensor-fusion.ai/gpu-indices",
    "GPUIsolationModeFilter": "gpu does not offer the requested isolation mode",
    "SharedWholeGPUFilter": "request needs a whole idle gpu",
    "PartitionTemplateFilter": "gpu has no partition for the request",
    "GPUResourceFilter": "insufficient tflops or vram",
    "GPUModelFilter": "gpu model does not match tensor-fusion.ai/gpu-model",
    "GPUVendorFilter": "gpu vendor does not match tensor-fusion.ai/vendor",
    "NodeAffinityFilter": (
        "node does not match the pod's node selector, affinity, tolerations or readiness,"
        " or already runs its pool's maximum workers per node"
    ),
    "SameNodeFilter": "not enough gpus on one node for tensor-fusion.ai/gpu-count",
}

NodeOk = Callable[[str], bool]

# Request isolation modes a GPU offering a mode can serve: a stronger limiter also serves weaker asks.
SUPPORTS: dict[str, tuple[str, ...]] = {
    "shared": ("shared",),
    "soft": ("shared", "soft"),
    "hard": ("shared", "soft", "hard"),
    "partitioned": ("partitioned",),
}


@dataclass
class StageDetail:
    name: str
    before: list[str]
    after: list[str]

    @property
    def diff(self) -> int:
        return len(self.before) - len(self.after)


@dataclass
class ChainResult:
    survivors: list[Gpu]
    stages: list[StageDetail] = field(default_factory=list)
    # The stage that removed each GPU (only with diagnostics).
    removed_by: dict[str, str] = field(default_factory=dict)


def tflops_needed(req: AllocRequest, gpu: Gpu) -> int:
    """Milli-TFLOPs this request takes on `gpu` (compute percent resolves per GPU)."""
    if req.dedicated_gpu:
        return gpu.virtual_tflops_m
    if req.request.percent_m:
        return gpu.capacity_tflops_m * req.request.percent_m // 100_000
    return req.request.tflops_m


def vram_needed(req: AllocRequest, gpu: Gpu) -> int:
    return gpu.capacity_vram if req.dedicated_gpu else req.request.vram


class Chain:
    """The stages compiled once for one request; `run` applies them to any list of GPUs."""

    def __init__(self, req: AllocRequest, node_ok: NodeOk, node_full: Callable[[str], bool]) -> None:
        self.req = req
        self.indices = frozenset(req.gpu_indices)
        self.model = req.gpu_model.lower()
        self.vendor = req.vendor.lower()
        self.whole = req.isolation == "shared" or req.dedicated_gpu
        self.plain = not req.dedicated_gpu and not req.request.percent_m
        self.node_ok = node_ok
        self.node_full = node_full
        self._node_memo: dict[str, bool] = {}

    def _node_pass(self, node: str) -> bool:
        r = self._node_memo.get(node)
        if r is None:
            r = self._node_memo[node] = self.node_ok(node) and not self.node_full(node)
        return r

    node_pass = _node_pass

    def accepts(self, g: Gpu) -> bool:
        """Whether one GPU passes every per-GPU stage (all but SameNodeFilter); mirrors `_stage`."""
        if g.phase != "Running":
            return False
        if self.indices and g.index not in self.indices:
            return False
        if g.isolation_mode and self.req.isolation not in SUPPORTS.get(g.isolation_mode, ()):
            return False
        if self.whole and (g.used_tflops_m != 0 or g.used_vram != 0):
            return False
        req = self.req
        if self.plain:
            if (
                g.virtual_tflops_m - g.used_tflops_m < req.request.tflops_m
                or g.capacity_vram - g.used_vram < req.request.vram
            ):
                return False
        elif g.available_tflops_m < tflops_needed(req, g) or g.available_vram < vram_needed(req, g):
            return False
        if self.model and g.model.lower() != self.model:
            return False
        if self.vendor and g.vendor.lower() != self.vendor:
            return False
        return self._node_pass(g.node)

    def _stage(self, name: str, cur: list[Gpu]) -> list[Gpu]:
        """One stage; returns `cur` itself when the stage cannot remove anything.
        A per-GPU condition added here must be added to `accepts` too (the fast path uses it)."""
        req = self.req
        if name == "PhaseFilter":
            return [g for g in cur if g.phase == "Running"]
        if name == "GPUIndexFilter":
            return [g for g in cur if g.index in self.indices] if self.indices else cur
        if name == "GPUIsolationModeFilter":
            iso = req.isolation
            return [g for g in cur if not g.isolation_mode or iso in SUPPORTS.get(g.isolation_mode, ())]
        if name == "SharedWholeGPUFilter":
            return [g for g in cur if g.used_tflops_m == 0 and g.used_vram == 0] if self.whole else cur
        if name == "PartitionTemplateFilter":
            return cur
        if name == "GPUResourceFilter":
            if self.plain:
                t, v = req.request.tflops_m, req.request.vram
                return [
                    g
                    for g in cur
                    if g.virtual_tflops_m - g.used_tflops_m >= t and g.capacity_vram - g.used_vram >= v
                ]
            return [
                g
                for g in cur
                if g.available_tflops_m >= tflops_needed(req, g) and g.available_vram >= vram_needed(req, g)
            ]
        if name == "GPUModelFilter":
            return [g for g in cur if g.model.lower() == self.model] if self.model else cur
        if name == "GPUVendorFilter":
            return [g for g in cur if g.vendor.lower() == self.vendor] if self.vendor else cur
        if name == "NodeAffinityFilter":
            # Once per node rather than per GPU: usually every node passes and nothing is copied.
            ok = self._node_pass
            bad = {n for n in {g.node for g in cur} if not ok(n)}
            return [g for g in cur if g.node not in bad] if bad else cur
        # SameNodeFilter: all GPUs of a multi-GPU request come from one node.
        if req.gpu_count <= 1 or not cur:
            return cur
        per_node: dict[str, int] = {}
        for g in cur:
            per_node[g.node] = per_node.get(g.node, 0) + 1
        return [g for g in cur if per_node[g.node] >= req.gpu_count]

    def run(
        self, gpus: Sequence[Gpu], *, diagnose: bool = False, names: list[str] | None = None
    ) -> ChainResult:
        """`names`, when given, must be the names of `gpus` in order (a cached list, never changed)."""
        result = ChainResult(survivors=[])
        current = list(gpus)
        if not diagnose:
            names = []
        elif names is None:
            names = [g.name for g in current]
        for stage in STAGES:
            after = self._stage(stage, current)
            if diagnose:
                if len(after) == len(current):  # stages only remove, so equal length means unchanged
                    result.stages.append(StageDetail(stage, names, names))
                else:
                    after_names = [g.name for g in after]
                    kept = set(after_names)
                    for n in names:
                        if n not in kept:
                            result.removed_by[n] = stage
                    result.stages.append(StageDetail(stage, names, after_names))
                    names = after_names
            current = after
            if not current and not diagnose:
                break
        result.survivors = current
        return result


def run_chain(
    req: AllocRequest,
    gpus: Sequence[Gpu],
    node_ok: NodeOk,
    node_full: Callable[[str], bool],
    *,
    diagnose: bool = False,
) -> ChainResult:
    """Apply every stage to `gpus`; the survivors are the GPUs the request may use."""
    return Chain(req, node_ok, node_full).run(gpus, diagnose=diagnose)
