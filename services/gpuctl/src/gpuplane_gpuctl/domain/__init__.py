"""Pure domain logic of the gpuctl service (no I/O)."""
