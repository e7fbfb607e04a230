"""Pure domain logic of the hypervisor service (no I/O)."""
