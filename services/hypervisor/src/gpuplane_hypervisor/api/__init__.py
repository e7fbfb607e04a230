"""HTTP routes of the hypervisor service: translate between HTTP and the domain."""
