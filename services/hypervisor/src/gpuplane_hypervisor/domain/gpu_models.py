"""Model facts kept as data: peak fp16 dense TFLOPs and an indicative hourly cost.

Lookup normalises the marketing name NVML reports ("NVIDIA H100 80GB HBM3")
and picks the longest table key it contains, so "H100 PCIe" wins over "H100".
"""

from __future__ import annotations

import re

# model key -> (fp16 dense TFLOPs, default cost per hour in USD)
GPU_MODELS: dict[str, tuple[float, float]] = {
    "H200": (989.0, 3.8),
    "H100 SXM": (989.0, 3.0),
    "H100 NVL": (835.0, 2.8),
    "H100 PCIE": (756.0, 2.5),
    "H100": (989.0, 3.0),
    "H800": (989.0, 3.0),
    "H20": (148.0, 1.2),
    "GH200": (989.0, 3.8),
    "B200": (2250.0, 6.0),
    "A100": (312.0, 1.8),
    "A800": (312.0, 1.8),
    "A40": (149.7, 0.9),
    "A30": (165.0, 0.8),
    "A10G": (70.0, 0.75),
    "A10": (125.0, 0.7),
    "L40S": (362.0, 1.2),
    "L40": (181.0, 1.0),
    "L20": (119.5, 0.8),
    "L4": (121.0, 0.6),
    "T4": (65.0, 0.35),
    "V100": (125.0, 0.9),
    "RTX 4090": (165.2, 0.5),
    "RTX 3090": (71.0, 0.3),
}

_PREFIXES = ("NVIDIA ", "TESLA ", "GEFORCE ")


def normalise_model(name: str) -> str:
    text = re.sub(r"\s+", " ", name.upper().replace("-", " ")).strip()
    changed = True
    while changed:
        changed = False
        for prefix in _PREFIXES:
            if text.startswith(prefix):
                text = text[len(prefix) :]
                changed = True
    return text


def _lookup(name: str) -> tuple[float, float] | None:
    text = normalise_model(name)
    best: str | None = None
    for key in GPU_MODELS:
        if re.search(rf"(^|\s){re.escape(key)}(\s|$)", text) and (best is None or len(key) > len(best)):
            best = key
    return GPU_MODELS[best] if best else None


def max_tflops(model: str) -> float:
    """Peak fp16 dense TFLOPs of ``model``; 0 when the model is not in the table."""
    hit = _lookup(model)
    return hit[0] if hit else 0.0


def cost_per_hour(model: str) -> float:
    hit = _lookup(model)
    return hit[1] if hit else 0.0
