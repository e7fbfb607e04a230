"""Scoring: score = round(vram% * vramWeight + tflops% * tflopsWeight), clamped to 0..100.

`CompactFirst` scores GPUs by used %, `LowLoadFirst` by available %, and
`NodeCompactGPULowLoad` prefers the most used node, then the least used GPU on it.
"""

from __future__ import annotations

from gpuplane_controller.domain.model import Gpu, PoolConfig


def used_score(used_vram: int, cap_vram: int, used_tflops: int, cap_tflops: int, cfg: PoolConfig) -> float:
    """Unrounded weighted used % (0..100 when weights sum to 1)."""
    v = used_vram * 100.0 / cap_vram if cap_vram else 100.0
    t = used_tflops * 100.0 / cap_tflops if cap_tflops else 100.0
    return v * cfg.vram_weight + t * cfg.tflops_weight


def gpu_score(gpu: Gpu, cfg: PoolConfig) -> float:
    """The GPU-level score the pool's strategy maximises (unrounded)."""
    used = used_score(gpu.used_vram, gpu.capacity_vram, gpu.used_tflops_m, gpu.virtual_tflops_m, cfg)
    if cfg.strategy == "CompactFirst":
        return used
    return 100.0 * (cfg.vram_weight + cfg.tflops_weight) - used


def node_score(used_vram: int, cap_vram: int, used_tflops: int, cap_tflops: int, cfg: PoolConfig) -> float:
    """Node-level score: only NodeCompactGPULowLoad ranks nodes (most used first)."""
    if cfg.strategy != "NodeCompactGPULowLoad":
        return 0.0
    return used_score(used_vram, cap_vram, used_tflops, cap_tflops, cfg)


def final_score(raw: float) -> int:
    """The reported score: rounded and clamped to 0..100."""
    return max(0, min(100, round(raw)))
