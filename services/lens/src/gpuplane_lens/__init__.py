"""gpuplane_lens."""
