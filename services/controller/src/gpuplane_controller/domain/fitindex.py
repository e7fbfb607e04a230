"""The one-GPU choice without a scan: GPUs of a pool in a grid of power-of-two
buckets of available TFLOPs x available VRAM, each cell a lazy min-heap of the
GPUs' ranking keys.

The compact strategies rank the fullest GPUs (or nodes) first, which are exactly
the ones a request no longer fits, and they fail in either dimension (VRAM used
up with TFLOPs left, or the reverse), so neither a per-node bound nor a 1-D
index prunes them. A GPU that fits a request of (t, v) has available amounts
>= (t, v), so its cell dominates the request's cell: a choice looks only at the
dominating cells and merges their heaps best key first. Only GPUs of the
boundary row/column that are short by less than a bucket width, or that other
filters reject, are popped and skipped.

Key of a GPU (smallest wins): (-node score, -GPU score, node, index, name),
which is the allocator's order for one-GPU requests: best (node score, GPU
score), ties to the smallest node name, then GPU index and name.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from gpuplane_controller.domain.model import Gpu, PoolConfig

Cell = tuple[int, int]
# (-node score, -gpu score, node, index, name, seq, gpu); seq keeps Gpu objects out of comparisons.
Entry = tuple[float, float, str, int, str, int, Gpu]


class Fallback(Exception):
    """Too many candidates rejected: the caller should use its node-by-node search instead."""


# Each power of two is split in 2**SUB_BITS buckets: finer buckets mean fewer GPUs in the
# boundary row/column that are short of a request, at the cost of more cells to merge.
SUB_BITS = 2


def bucket(amount: int) -> int:
    """Monotonic in `amount` (so a GPU with more available never lands in a lower bucket);
    the leading bit and the next SUB_BITS bits; 0 for nothing available."""
    if amount <= 0:
        return 0
    n = amount.bit_length()
    if n <= SUB_BITS:
        return amount
    return (n << SUB_BITS) | ((amount >> (n - 1 - SUB_BITS)) & ((1 << SUB_BITS) - 1))


def cell_of(g: Gpu) -> Cell:
    return bucket(g.virtual_tflops_m - g.used_tflops_m), bucket(g.capacity_vram - g.used_vram)


class FitIndex:
    """Every GPU of one pool (any phase: the caller's filter decides), keyed for one PoolConfig.

    Node changes are queued in `pending` and applied at the next query, so a
    burst of reservations on one node costs one re-key.
    """

    def __init__(self, cfg: PoolConfig) -> None:
        self.cfg = cfg
        self.cells: dict[Cell, list[Entry]] = {}
        self.live: dict[Cell, int] = {}
        self.current: dict[str, tuple[Cell, Entry]] = {}
        self.pending: set[str] = set()
        self._seq = itertools.count()

    def put(self, g: Gpu, node_score: float, gpu_score: float) -> None:
        cell = cell_of(g)
        old = self.current.get(g.name)
        if old is not None:
            oc, oe = old
            if oc == cell and oe[0] == -node_score and oe[1] == -gpu_score and oe[6] is g:
                return  # unchanged: the entry in the heap is still right
            self._unlive(oc)
        e: Entry = (-node_score, -gpu_score, g.node, g.index, g.name, next(self._seq), g)
        self.current[g.name] = (cell, e)
        heap = self.cells.get(cell)
        if heap is None:
            heap = self.cells[cell] = []
            self.live[cell] = 0
        heapq.heappush(heap, e)
        live = self.live[cell] = self.live[cell] + 1
        if len(heap) > 2 * live + 32:  # mostly stale entries: rebuild from the live ones
            cur = self.current
            heap[:] = [x for x in heap if (c := cur.get(x[4])) is not None and c[1] is x]
            heapq.heapify(heap)

    def drop(self, name: str) -> None:
        old = self.current.pop(name, None)
        if old is not None:
            self._unlive(old[0])

    def _unlive(self, cell: Cell) -> None:
        n = self.live[cell] = self.live[cell] - 1
        if n == 0:  # an empty cell is never looked at again
            del self.live[cell]
            del self.cells[cell]

    def _top(self, heap: list[Entry]) -> Entry | None:
        cur = self.current
        while heap:
            e = heap[0]
            c = cur.get(e[4])
            if c is not None and c[1] is e:
                return e
            heapq.heappop(heap)  # stale: the GPU was re-keyed, moved or removed
        return None

    def best(
        self, need_tflops_m: int, need_vram: int, accept: Callable[[Gpu], bool], budget: int
    ) -> Entry | None:
        """The smallest-key GPU `accept`s, looking only where at least (need_tflops_m, need_vram) is
        available; `need_*` must be lower bounds of what an accepted GPU has available. Raises
        Fallback once `accept` rejected more than `budget` GPUs that had the room."""
        t, v = need_tflops_m, need_vram
        qt, qv = bucket(t), bucket(v)
        cur = self.current
        sources: list[list[Entry]] = []  # a cell's heap, or a filtered copy of a boundary cell
        shared: list[bool] = []  # whether the source is the cell's own heap (popped entries go back)
        boundary: list[int] = []  # cells in the request's row/column: room short of a bucket width
        merge: list[tuple[Entry, int]] = []
        for cell, heap in self.cells.items():
            if cell[0] >= qt and cell[1] >= qv:
                top = self._top(heap)
                if top is not None:
                    merge.append((top, len(sources)))
                    sources.append(heap)
                    shared.append(True)
                    boundary.append(1 if cell[0] == qt or cell[1] == qv else 0)
        heapq.heapify(merge)
        taken: list[tuple[list[Entry], Entry]] = []
        rejected = 0
        try:
            while merge:
                e, i = heapq.heappop(merge)
                src = sources[i]
                heapq.heappop(src)  # `e` is its top
                if shared[i]:
                    taken.append((src, e))
                g = e[6]
                if g.virtual_tflops_m - g.used_tflops_m >= t and g.capacity_vram - g.used_vram >= v:
                    if accept(g):
                        return e
                    rejected += 1  # had the room: another filter said no
                    if rejected > budget:
                        raise Fallback
                elif boundary[i]:
                    boundary[i] += 1
                    if shared[i] and boundary[i] > 2:
                        # Many short GPUs at the top of this boundary cell: keep only those with room.
                        src = sources[i] = [
                            x
                            for x in src
                            if (c := cur.get(x[4])) is not None
                            and c[1] is x
                            and x[6].virtual_tflops_m - x[6].used_tflops_m >= t
                            and x[6].capacity_vram - x[6].used_vram >= v
                        ]
                        heapq.heapify(src)
                        shared[i] = False
                top = self._top(src)
                if top is not None:
                    heapq.heappush(merge, (top, i))
            return None
        finally:
            for heap, e in taken:
                heapq.heappush(heap, e)
