"""Use cases: each combines the store, the cluster adapters and the pure domain rules."""
