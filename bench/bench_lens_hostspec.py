"""Lens bootstrap host-spec expansion: the 256-host cap is applied before expansion, so a huge
range is refused in microseconds and without memory growth; a full 256-host range expands fast.

Run: uv run python bench/bench_lens_hostspec.py
"""

from __future__ import annotations

import time
import tracemalloc

from gpuplane_core.errors import GpuplaneError
from gpuplane_lens.domain.hostspec import expand


def _refuse() -> None:
    try:
        expand([("0.0.0.0-255.255.255.255", 22)])
    except GpuplaneError:
        return
    raise AssertionError("the whole IPv4 space was accepted")


def main() -> None:
    rounds = 2000
    tracemalloc.start()
    start = time.perf_counter()
    for _ in range(rounds):
        _refuse()
    refuse_us = (time.perf_counter() - start) / rounds * 1e6
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    start = time.perf_counter()
    for _ in range(200):
        assert len(expand([("10.0.0.0-10.0.0.255", 22)])[0]) == 256
    expand_ms = (time.perf_counter() - start) / 200 * 1e3
    print(
        f"refuse 0.0.0.0-255.255.255.255: {refuse_us:.1f} us/call, peak traced memory {peak / 1024:.1f} KiB"
    )
    print(f"expand 256 hosts: {expand_ms:.2f} ms/call")
    print(
        f"SUMMARY: cap refusal {refuse_us:.1f} us, peak {peak / 1024:.1f} KiB; "
        f"256-host expansion {expand_ms:.2f} ms"
    )


if __name__ == "__main__":
    main()
