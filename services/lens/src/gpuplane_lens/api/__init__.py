"""HTTP routes of the lens service: translate between HTTP and the domain."""
