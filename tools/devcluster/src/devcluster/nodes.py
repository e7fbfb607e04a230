"""Fake GPU nodes: ordinary Node objects that kwok keeps Ready.

They carry `nvidia.com/gpu` capacity, the GPU model/vendor labels the
device plugin and GPU feature discovery would set, and the GPU taint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MANAGED_LABEL = "devcluster.gpuplane.io/managed"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@dataclass(frozen=True)
class GpuModel:
    name: str  # short name used by TensorFusion's gpu-model annotation
    product: str  # nvidia.com/gpu.product as GPU feature discovery sets it
    memory_mib: int


GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel("H100", "NVIDIA-H100-80GB-HBM3", 81559),
        GpuModel("H200", "NVIDIA-H200", 143771),
        GpuModel("A100", "NVIDIA-A100-SXM4-80GB", 81920),
        GpuModel("L4", "NVIDIA-L4", 23034),
        GpuModel("T4", "Tesla-T4", 15360),
    )
}


@dataclass(frozen=True)
class NodeShape:
    gpus: int = 8
    model: str = "H100"
    cpu: str = "96"
    memory: str = "1024Gi"
    pods: str = "256"


def gpu_node(name: str, shape: NodeShape, extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    if shape.model not in GPU_MODELS:
        raise ValueError(f"unknown GPU model {shape.model!r}; known: {', '.join(GPU_MODELS)}")
    model = GPU_MODELS[shape.model]
    resources = {
        "cpu": shape.cpu,
        "memory": shape.memory,
        "pods": shape.pods,
        "ephemeral-storage": "1Ti",
        "nvidia.com/gpu": str(shape.gpus),
    }
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        MANAGED_LABEL: "true",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(shape.gpus),
        "nvidia.com/gpu.product": model.product,
        "nvidia.com/gpu.memory": str(model.memory_mib),
        "tensor-fusion.ai/gpu-vendor": "NVIDIA",
        "tensor-fusion.ai/gpu-model": model.name,
        "runwhere.ai/gpu-type": model.name,
        **(extra_labels or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [GPU_TAINT]},
        "status": {"capacity": resources, "allocatable": resources},
    }


def cpu_node(name: str) -> dict[str, Any]:
    resources = {"cpu": "32", "memory": "128Gi", "pods": "256", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                MANAGED_LABEL: "true",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": {"capacity": resources, "allocatable": resources},
    }
