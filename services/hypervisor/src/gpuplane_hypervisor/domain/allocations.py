"""The node's allocations as the controller streams them (see node_agent.proto).

A full listing (RESET, ADDED..., SYNCED) is staged and swapped in at SYNCED, so
the previous state keeps being served while a reconnect relists; resumed
streams apply their changes directly.
"""

from __future__ import annotations

from gpuplane_hypervisor.domain.models import Allocation, AllocationEvent, EventType


class AllocationState:
    def __init__(self) -> None:
        self._current: dict[str, Allocation] = {}
        self._staging: dict[str, Allocation] | None = None
        self._staging_revision = 0
        self.revision = 0
        self.synced = False

    @property
    def allocations(self) -> dict[str, Allocation]:
        return self._current

    def get(self, pod_uid: str) -> Allocation | None:
        return self._current.get(pod_uid)

    def restore(self, allocations: list[Allocation], revision: int) -> None:
        """Load a saved snapshot (served until the controller answers; never marks synced)."""
        self._current = {a.pod_uid: a for a in allocations}
        self.revision = revision

    def begin_stream(self) -> int:
        """A new stream starts: drop any half-received listing; resume from the last complete revision."""
        self._staging = None
        return self.revision

    def apply(self, event: AllocationEvent) -> bool:
        """Apply one event; True when the served state changed.

        The revision only advances for state actually applied: an interrupted listing must not
        make the next stream resume past allocations that were never received.
        """
        kind = event.type
        if kind is EventType.RESET:
            self._staging = {}
            self._staging_revision = event.revision
            return False
        if self._staging is not None:
            self._staging_revision = max(self._staging_revision, event.revision)
        else:
            self.revision = max(self.revision, event.revision)
        if kind is EventType.SYNCED:
            self.synced = True
            if self._staging is not None:
                changed = self._staging != self._current
                self._current, self._staging = self._staging, None
                # A listing replaces everything, so its revision wins even if it went backwards
                # (a restarted controller numbers afresh).
                self.revision = self._staging_revision
                return changed
            return False
        alloc = event.allocation
        if alloc is None or not alloc.pod_uid:
            return False
        target = self._staging if self._staging is not None else self._current
        if kind is EventType.DELETED:
            return target.pop(alloc.pod_uid, None) is not None and target is self._current
        target[alloc.pod_uid] = alloc
        return target is self._current
