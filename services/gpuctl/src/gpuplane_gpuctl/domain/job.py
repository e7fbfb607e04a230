"""A job as found in the cluster: its controller object and pods (camelCase JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuplane_gpuctl.domain.manifests import RESOURCE_TYPES


@dataclass
class Job:
    namespace: str
    name: str
    kind: str
    workload: dict[str, Any]
    pods: list[dict[str, Any]] = field(default_factory=list)

    @property
    def resource_type(self) -> str:
        return RESOURCE_TYPES.get(self.kind, str(self.workload.get("kind", "")))
