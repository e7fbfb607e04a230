"""JSON shapes of the Hypervisor HTTP API (PascalCase device and worker fields)."""

from __future__ import annotations

from typing import Any

from gpuplane_hypervisor.domain.models import DeviceInfo


def device_json(d: DeviceInfo) -> dict[str, Any]:
    return {
        "UUID": d.uuid,
        "Vendor": d.vendor,
        "Model": d.model,
        "Index": d.index,
        "NUMANode": d.numa_node,
        "TotalMemoryBytes": d.total_memory_bytes,
        "MaxTflops": d.max_tflops,
        "Healthy": d.healthy,
        "UnhealthyReason": d.unhealthy_reason,
        "IsolationMode": d.isolation_mode,
        "Properties": d.properties,
    }
