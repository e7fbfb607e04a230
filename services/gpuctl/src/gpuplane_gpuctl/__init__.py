"""gpuplane_gpuctl."""
