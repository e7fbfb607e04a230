"""gpuplane_controller."""
