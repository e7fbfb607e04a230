"""Pick the backend the configuration names; never fall back silently from NVML to simulation."""

from __future__ import annotations

import logging

from gpuplane_hypervisor.gpu.backend import BackendUnavailable, GpuBackend
from gpuplane_hypervisor.gpu.null import NullBackend
from gpuplane_hypervisor.gpu.simulated import SimulatedBackend
from gpuplane_hypervisor.settings import Settings

log = logging.getLogger(__name__)


def open_backend(settings: Settings) -> tuple[GpuBackend | None, str | None]:
    """The started backend, or (None, reason) when NVML failed and ``fail_on_init_error`` is set.

    With ``fail_on_init_error=false`` an NVML failure yields the null backend (no devices),
    logged as a warning, so the node still reports in but offers nothing.
    """
    backend: GpuBackend
    if settings.backend == "simulated":
        backend = SimulatedBackend(
            settings.simulated_devices, settings.node_name, settings.simulated_usage_file
        )
    elif settings.backend == "null":
        backend = NullBackend()
    else:
        from gpuplane_hypervisor.gpu.nvml import NvmlBackend

        backend = NvmlBackend()
    try:
        backend.init()
    except BackendUnavailable as e:
        if settings.fail_on_init_error:
            log.error("GPU backend %s unavailable: %s", backend.name, e)
            return None, str(e)
        log.warning("GPU backend %s unavailable, serving no devices: %s", backend.name, e)
        null = NullBackend()
        return null, None
    return backend, None
