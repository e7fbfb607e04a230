"""GPU and GPUNode objects written from the hypervisor's device reports (NodeAgentService)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_controller.k8s.events import now
from gpuplane_controller.k8s.sources import GROUP, VERSION
from gpuplane_core.k8s.errors import k8s_errors
from gpuplane_core.quantity import format_quantity

MERGE = "application/merge-patch+json"
ISOLATION_NAMES = {1: "shared", 2: "soft", 3: "hard", 4: "partitioned"}


@dataclass
class DeviceReport:
    uuid: str
    vendor: str
    model: str
    index: int
    numa_node: int
    total_memory_bytes: int
    max_tflops: float
    healthy: bool
    unhealthy_reason: str
    isolation_mode: str


def gpu_object_name(uuid: str) -> str:
    """A valid object name from a device UUID: lower-cased, other characters replaced by '-'."""
    name = re.sub(r"[^a-z0-9.-]+", "-", uuid.lower()).strip("-.")
    return name[:253] or "gpu"


def _tflops(value: float) -> str:
    return format_quantity(Decimal(repr(float(value))))


class Inventory:
    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)

    async def _ensure(self, plural: str, name: str, labels: dict[str, str]) -> None:
        kind = {"gpus": "GPU", "gpunodes": "GPUNode"}[plural]
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": kind,
            "metadata": {"name": name, "labels": labels},
        }
        try:
            await self.custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
        except ApiException as e:
            if e.status != 409:
                async with k8s_errors(f"{plural} {name}"):
                    raise
            await self.custom.patch_cluster_custom_object(
                GROUP, VERSION, plural, name, {"metadata": {"labels": labels}}, _content_type=MERGE
            )

    async def _status(self, plural: str, name: str, status: dict[str, Any]) -> None:
        async with k8s_errors(f"{plural} {name}"):
            await self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, plural, name, {"status": status}, _content_type=MERGE
            )

    async def report_devices(
        self, node: str, devices: list[DeviceReport], version: str, available: dict[str, tuple[str, str]]
    ) -> list[str]:
        """Create or update every device's GPU object and the node's GPUNode; returns GPU names."""
        names: list[str] = []
        for d in devices:
            name = gpu_object_name(d.uuid)
            names.append(name)
            await self._ensure("gpus", name, {"tensor-fusion.ai/node": node})
            capacity = {
                "tflops": _tflops(d.max_tflops),
                "vram": format_quantity(d.total_memory_bytes, binary=True),
            }
            status: dict[str, Any] = {
                "phase": "Running" if d.healthy else "Unknown",
                "vendor": d.vendor,
                "model": d.model,
                "capacity": capacity,
                "available": {
                    "tflops": available.get(name, (capacity["tflops"], ""))[0] or capacity["tflops"],
                    "vram": available.get(name, ("", capacity["vram"]))[1] or capacity["vram"],
                },
                "uuid": d.uuid.lower(),
                "index": d.index,
                "numaNode": d.numa_node,
                "nodeSelector": {"kubernetes.io/hostname": node},
                "usedBy": "tensor-fusion.ai",
                "message": "device healthy" if d.healthy else (d.unhealthy_reason or "device unhealthy"),
            }
            if d.isolation_mode:
                status["isolationMode"] = d.isolation_mode
            await self._status("gpus", name, status)
        await self._ensure("gpunodes", node, {})
        total_t = sum(Decimal(repr(float(d.max_tflops))) for d in devices)
        total_v = sum(d.total_memory_bytes for d in devices)
        await self._status(
            "gpunodes",
            node,
            {
                "phase": "Running",
                "totalTFlops": format_quantity(total_t),
                "totalVRAM": format_quantity(total_v, binary=True),
                "totalGPUs": len(devices),
                "managedGPUs": len(devices),
                "managedGPUDeviceIDs": [d.uuid.lower() for d in devices],
                "hypervisorStatus": {
                    "hypervisorState": "Running",
                    "hypervisorVersion": version,
                    "lastHeartbeatTime": now(),
                },
            },
        )
        return names

    async def set_phase(self, name: str, phase: str, message: str) -> None:
        await self._status("gpus", name, {"phase": phase, "message": message})
