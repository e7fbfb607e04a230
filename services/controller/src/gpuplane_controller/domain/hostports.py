"""Cluster-level host port assignment (`POST /api/assign-host-port`): one port per pod
name out of a fixed range, idempotent, handed out round-robin so a just-released port
is the last to be reused (a late packet for the old pod should not reach the new one)."""

from __future__ import annotations

from gpuplane_core.errors import InsufficientCapacity, InvalidSpec


def parse_port_range(text: str) -> tuple[int, int]:
    """`"42000-62000"` -> (42000, 62000), inclusive; rejects empty or out-of-range ranges."""
    lo_s, sep, hi_s = text.strip().partition("-")
    if not sep or not lo_s.strip().isdigit() or not hi_s.strip().isdigit():
        raise InvalidSpec(f"host port range {text!r} is not LOW-HIGH", field="cluster_host_port_range")
    lo, hi = int(lo_s), int(hi_s)
    if not 1 <= lo <= hi <= 65535:
        raise InvalidSpec(
            f"host port range {text!r} must satisfy 1 <= LOW <= HIGH <= 65535",
            field="cluster_host_port_range",
        )
    return lo, hi


class HostPortAllocator:
    """Pure bookkeeping: which pod name holds which port of [lo, hi]."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self.by_pod: dict[str, int] = {}
        self.by_port: dict[int, str] = {}
        self._cursor = lo

    def __contains__(self, port: int) -> bool:
        return self.lo <= port <= self.hi

    def assign(self, pod: str) -> int:
        """The pod's port, choosing the next free one after the last handed out if it has none."""
        held = self.by_pod.get(pod)
        if held is not None:
            return held
        size = self.hi - self.lo + 1
        if len(self.by_port) >= size:
            raise InsufficientCapacity(
                f"no free host port in {self.lo}-{self.hi}", code="host_ports_exhausted", field="podName"
            )
        port = self._cursor
        while port in self.by_port:
            port = self.lo if port == self.hi else port + 1
        self._cursor = self.lo if port == self.hi else port + 1
        self.by_pod[pod] = port
        self.by_port[port] = pod
        return port

    def restore(self, pod: str, port: int) -> bool:
        """Re-record a port known from the ledger or a pod annotation; False if it cannot be."""
        if port not in self or self.by_port.get(port, pod) != pod or self.by_pod.get(pod, port) != port:
            return False
        self.by_pod[pod] = port
        self.by_port[port] = pod
        if port >= self._cursor:  # keep handing out ports after the highest restored one
            self._cursor = self.lo if port == self.hi else port + 1
        return True

    def release(self, pod: str) -> int | None:
        port = self.by_pod.pop(pod, None)
        if port is not None:
            self.by_port.pop(port, None)
        return port
