"""Hypervisor liveness from per-node Leases, judged the way Kubernetes' node lifecycle controller
judges kubelet leases: a lease counts as renewed when its renewTime *changes*, timed by the
observer's own monotonic clock, so clock skew between controller replicas does not matter."""

from __future__ import annotations


class LeaseTracker:
    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, float]] = {}  # node -> (renewTime, observed at)

    def observe(self, node: str, renew_time: str, now: float) -> None:
        old = self._seen.get(node)
        if old is None or old[0] != renew_time:
            self._seen[node] = (renew_time, now)

    def forget(self, node: str) -> None:
        self._seen.pop(node, None)

    def restart_clock(self, now: float) -> None:
        """A new leader gives every node a full timeout from now before judging it."""
        self._seen = {n: (rt, now) for n, (rt, _) in self._seen.items()}

    def nodes(self) -> list[str]:
        return list(self._seen)

    def is_stale(self, node: str, now: float, timeout: float) -> bool:
        seen = self._seen.get(node)
        return seen is not None and now - seen[1] > timeout
