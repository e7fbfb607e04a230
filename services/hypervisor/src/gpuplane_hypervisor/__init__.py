"""gpuplane_hypervisor."""
