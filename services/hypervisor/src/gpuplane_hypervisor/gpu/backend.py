"""The one interface the agent uses for accelerators; implementations live next to it.

Calls are synchronous (NVML is); the agent runs them in a worker thread.
"""

from __future__ import annotations

from typing import Protocol

from gpuplane_hypervisor.domain.models import DeviceInfo, DeviceSample


class BackendUnavailable(Exception):
    """The backend could not start (e.g. NVML init failed); the message says why."""


class BackendError(Exception):
    """A discovery or sampling call failed as a whole (single-device failures are reported as health)."""


class GpuBackend(Protocol):
    name: str

    def init(self) -> None:
        """Open the backend; raise BackendUnavailable with the reason when that fails."""
        ...

    def discover(self) -> list[DeviceInfo]:
        """Every device on the node, healthy or not."""
        ...

    def sample(self) -> list[DeviceSample]:
        """Current usage and per-process accounting of every device."""
        ...

    def shutdown(self) -> None: ...
