"""How fast the devcluster brings up N kwok GPU nodes (default 1,000) to Ready.

Uses its own cluster ("bench") so it never disturbs `make run` or the tests.
"""

from __future__ import annotations

import os
import time

from devcluster.cluster import DevCluster, run_async
from devcluster.k8s_ops import api_client, ensure_nodes, wait_nodes_ready
from devcluster.nodes import NodeShape

NODES = int(os.environ.get("BENCH_NODES", "1000"))


async def scale(cluster: DevCluster) -> tuple[float, float]:
    api = await api_client(cluster.kubeconfig)
    try:
        t0 = time.monotonic()
        names = await ensure_nodes(
            api,
            gpu_nodes=NODES,
            shape=NodeShape(8, "H100"),
            cpu_nodes=0,
            progress=lambda _m: None,
            prefix="bench",
        )
        created = time.monotonic() - t0
        await wait_nodes_ready(api, names, lambda m: print(f"  {m}", flush=True), timeout=900)
        return created, time.monotonic() - t0
    finally:
        await api.close()


def main() -> None:
    cluster = DevCluster("bench")
    t0 = time.monotonic()
    cluster.up(gpu_nodes=0, cpu_nodes=0, progress=lambda m: print(f"  {m}", flush=True))
    print(f"control plane up: {time.monotonic() - t0:.1f}s")
    try:
        created, ready = run_async(scale(cluster))
    finally:
        cluster.down(progress=lambda _m: None)
    print(f"nodes: {NODES} (8×H100 each, {NODES * 8} GPUs)")
    print(f"created: {created:.1f}s ({NODES / created:.0f} nodes/s)")
    print(f"all Ready: {ready:.1f}s ({NODES / ready:.0f} nodes/s)")
    print(f"SUMMARY: {NODES} GPU nodes created in {created:.1f}s, all Ready after {ready:.1f}s")


if __name__ == "__main__":
    main()
