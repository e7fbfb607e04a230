"""HTTP routes of the gpuctl service: translate between HTTP and the domain."""
