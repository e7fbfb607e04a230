"""Pure domain logic of the controller service (no I/O)."""
