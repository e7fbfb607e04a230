"""Pure domain logic of the lens service (no I/O)."""
