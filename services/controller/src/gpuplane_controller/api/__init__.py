"""HTTP routes of the controller service: translate between HTTP and the domain."""
