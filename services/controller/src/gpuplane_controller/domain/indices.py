"""Device index assignment (`GET /api/assign-index`): 1..128, cycling, idempotent per pod.

The cursor moves on after every new assignment and skips indices held by live pods, so
up to 128 pods always hold distinct indices. With more than 128 live holders the
sequence keeps cycling (as TensorFusion does) and indices are shared: each index is then
held by at most ceil(holders / 128) pods."""

from __future__ import annotations

MAX_INDEX = 128


class IndexAllocator:
    def __init__(self, size: int = MAX_INDEX) -> None:
        self.size = size
        self.by_pod: dict[str, int] = {}
        self.holders: dict[int, int] = {}  # index -> number of pods holding it
        self._cursor = 1

    def _next(self, i: int) -> int:
        return 1 if i >= self.size else i + 1

    def assign(self, pod: str) -> int:
        held = self.by_pod.get(pod)
        if held is not None:
            return held
        idx = self._cursor
        if len(self.holders) < self.size:  # a free index exists: skip held ones
            while idx in self.holders:
                idx = self._next(idx)
        else:  # all held: the least shared index at or after the cursor
            least = min(self.holders.values())
            while self.holders[idx] != least:
                idx = self._next(idx)
        self._cursor = self._next(idx)
        self._take(pod, idx)
        return idx

    def restore(self, pod: str, idx: int) -> bool:
        if not 1 <= idx <= self.size or pod in self.by_pod:
            return self.by_pod.get(pod) == idx
        self._take(pod, idx)
        if idx >= self._cursor:  # keep cycling after the highest restored index
            self._cursor = self._next(idx)
        return True

    def _take(self, pod: str, idx: int) -> None:
        self.by_pod[pod] = idx
        self.holders[idx] = self.holders.get(idx, 0) + 1

    def release(self, pod: str) -> int | None:
        idx = self.by_pod.pop(pod, None)
        if idx is not None:
            n = self.holders[idx] - 1
            if n:
                self.holders[idx] = n
            else:
                del self.holders[idx]
        return idx
