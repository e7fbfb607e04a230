"""gpuplane_core."""
