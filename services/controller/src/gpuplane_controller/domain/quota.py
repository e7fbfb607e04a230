"""GPUResourceQuota: per-namespace totals and per-workload (single) limits, checked first."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplane_controller.domain.model import AllocRequest, Quota


@dataclass
class NamespaceUsage:
    tflops_m: int = 0
    vram: int = 0
    limit_tflops_m: int = 0
    limit_vram: int = 0
    workers: int = 0

    def add(self, req: AllocRequest, sign: int) -> None:
        n = req.gpu_count
        self.tflops_m += sign * req.request.tflops_m * n
        self.vram += sign * req.request.vram * n
        self.limit_tflops_m += sign * req.limit.tflops_m * n
        self.limit_vram += sign * req.limit.vram * n
        self.workers += sign


def _fmt_t(milli: int) -> str:
    return f"{milli / 1000:g}"


def _fmt_v(b: int) -> str:
    return f"{b / 2**30:g}Gi"


def check_quota(q: Quota, used: NamespaceUsage, req: AllocRequest) -> str | None:
    """None when `req` fits the quota, else which limit it breaks."""
    n = req.gpu_count
    r, lim = req.request, req.limit
    if q.single_max_gpu_count is not None and n > q.single_max_gpu_count:
        return f"gpu-count {n} exceeds single.maxGPUCount {q.single_max_gpu_count}"
    checks = (
        (q.single_max_tflops_m, r.tflops_m, "single.maxRequests.tflops", _fmt_t),
        (q.single_max_vram, r.vram, "single.maxRequests.vram", _fmt_v),
        (q.single_max_limit_tflops_m, lim.tflops_m, "single.maxLimits.tflops", _fmt_t),
        (q.single_max_limit_vram, lim.vram, "single.maxLimits.vram", _fmt_v),
    )
    for cap, value, what, fmt in checks:
        if cap is not None and value > cap:
            return f"request {fmt(value)} exceeds {what} {fmt(cap)}"
    totals = (
        (q.total_tflops_m, used.tflops_m, r.tflops_m * n, "total.requests.tflops", _fmt_t),
        (q.total_vram, used.vram, r.vram * n, "total.requests.vram", _fmt_v),
        (q.total_limit_tflops_m, used.limit_tflops_m, lim.tflops_m * n, "total.limits.tflops", _fmt_t),
        (q.total_limit_vram, used.limit_vram, lim.vram * n, "total.limits.vram", _fmt_v),
    )
    for cap, in_use, value, what, fmt in totals:
        if cap is not None and in_use + value > cap:
            return f"quota exceeded: {what} {fmt(cap)}, in use {fmt(in_use)}, requested {fmt(value)}"
    if q.max_workers is not None and used.workers + 1 > q.max_workers:
        return f"quota exceeded: total.maxWorkers {q.max_workers}, in use {used.workers}"
    return None
