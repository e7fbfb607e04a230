"""A backend with no devices (nodes without accelerators, or NVML unavailable and tolerated)."""

from __future__ import annotations

from gpuplane_hypervisor.domain.models import DeviceInfo, DeviceSample


class NullBackend:
    name = "null"

    def init(self) -> None:
        return None

    def discover(self) -> list[DeviceInfo]:
        return []

    def sample(self) -> list[DeviceSample]:
        return []

    def shutdown(self) -> None:
        return None
