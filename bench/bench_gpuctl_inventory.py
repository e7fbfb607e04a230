"""gpuctl inventory: GET /api/v1/nodes and GET /api/v1/pools latency with 1,000 nodes and 10,000 pods.

Runs on its own devcluster ("bench-gpuctl2") with a `gpuctl-server` subprocess and downs it at
the end. Nodes are kwok GPU nodes of two GPU types (A100 / H100) spread over 10 pools; pods are
bound directly to nodes (no scheduling wait), half of them requesting one GPU (at most 5 per
8-GPU node, so no node is oversubscribed).
Knobs: BENCH_NODES (1000), BENCH_PODS (10000), BENCH_REQUESTS (200 per endpoint).
Target: p99 <= 200 ms.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from typing import Any

import httpx

from devcluster.cluster import DevCluster, run_async
from devcluster.k8s_ops import api_client, create_node, wait_nodes_ready
from devcluster.nodes import NodeShape, gpu_node
from devcluster.services import free_port

NODES = int(os.environ.get("BENCH_NODES", "1000"))
PODS = int(os.environ.get("BENCH_PODS", "10000"))
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "200"))
POOLS = 10


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))] * 1000


def node_name(i: int) -> str:
    return f"inv-{i:04d}"


async def populate(cluster: DevCluster) -> tuple[float, float]:
    from kubernetes_asyncio import client

    api = await api_client(cluster.kubeconfig)
    core = client.CoreV1Api(api)
    sem = asyncio.Semaphore(48)
    try:
        t0 = time.monotonic()

        async def node(i: int) -> None:
            shape = NodeShape(gpus=8, model="A100" if i % 2 else "H100")
            async with sem:
                await create_node(
                    core, gpu_node(node_name(i), shape, {"runwhere.ai/pool": f"pool-{i % POOLS}"})
                )

        await asyncio.gather(*(node(i) for i in range(NODES)))
        await wait_nodes_ready(api, [node_name(i) for i in range(NODES)], lambda _m: None, timeout=900)
        nodes_s = time.monotonic() - t0
        print(f"{NODES} nodes Ready in {nodes_s:.1f}s", flush=True)
        await core.create_namespace(
            {"metadata": {"name": "bench", "labels": {"runwhere.ai/namespace": "true"}}}
        )

        t1 = time.monotonic()

        async def pod(i: int) -> None:
            limits = {
                "cpu": "100m",
                "memory": "64Mi",
                **({"nvidia.com/gpu": "1"} if (i // NODES) % 2 == 0 else {}),
            }
            body: dict[str, Any] = {
                "metadata": {"name": f"inv-pod-{i:05d}", "labels": {"runwhere.ai/job-type": "inference"}},
                "spec": {
                    "nodeName": node_name(i % NODES),
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}],
                },
            }
            async with sem:
                await core.create_namespaced_pod("bench", body)

        for start in range(0, PODS, 1000):
            await asyncio.gather(*(pod(i) for i in range(start, min(PODS, start + 1000))))
            print(f"  pods: {min(PODS, start + 1000)}/{PODS}", flush=True)
        return nodes_s, time.monotonic() - t1
    finally:
        await api.close()


def timed(c: httpx.Client, path: str, params: dict[str, Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        p = {k: (v() if callable(v) else v) for k, v in params.items()}
        t = time.perf_counter()
        r = c.get(path, params=p)
        out.append(time.perf_counter() - t)
        if r.status_code != 200:
            raise RuntimeError(f"GET {path}: {r.status_code} {r.text}")
    return out


def main() -> None:
    cluster = DevCluster("bench-gpuctl2")
    port = free_port()
    server: subprocess.Popen[bytes] | None = None
    try:
        cluster.up(gpu_nodes=0, cpu_nodes=0, progress=lambda m: print(f"  {m}", flush=True))
        _, pods_s = run_async(populate(cluster))
        print(f"{PODS} pods created in {pods_s:.1f}s", flush=True)
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "GPUPLANE_GPUCTL_HTTP_HOST": "127.0.0.1",
            "GPUPLANE_GPUCTL_HTTP_PORT": str(port),
            "GPUPLANE_GPUCTL_LOG_LEVEL": "WARNING",
        }
        server = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "gpuctl-server")], env=env)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v1", timeout=60) as c:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if c.get("/nodes", params={"pageSize": 1}).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("gpuctl-server did not start")
                time.sleep(0.2)
            # Settled: every node listed and every GPU pod counted.
            want_used = sum(1 for i in range(PODS) if (i // NODES) % 2 == 0)
            deadline = time.monotonic() + 600
            used = total = 0
            while time.monotonic() < deadline:
                pools = c.get("/pools").json()
                used = sum(p["gpuUsed"] for p in pools)
                total = c.get("/nodes", params={"pageSize": 1}).json()["total"]
                if total >= NODES and used >= want_used:
                    break
                time.sleep(1)
            print(
                f"gpuctl sees {total} nodes, {len(pools)} pools, "
                f"{used} GPUs used of {sum(p['gpuTotal'] for p in pools)}"
            )

            nodes20 = timed(c, "/nodes", {"page": lambda: random.randint(1, NODES // 20)}, REQUESTS)
            nodes_all = timed(c, "/nodes", {"pageSize": 1000}, REQUESTS // 4)
            filt = timed(
                c, "/nodes", {"pool": lambda: f"pool-{random.randrange(POOLS)}", "gpuType": "A100"}, REQUESTS
            )
            pools_lat = timed(c, "/pools", {}, REQUESTS)
        for label, lat in (
            ("GET /nodes (page of 20)", nodes20),
            ("GET /nodes (pageSize 1000)", nodes_all),
            ("GET /nodes?pool&gpuType", filt),
            ("GET /pools", pools_lat),
        ):
            print(f"{label}: p50 {pct(lat, 50):.1f} ms, p99 {pct(lat, 99):.1f} ms")
        print(
            f"SUMMARY: {NODES} nodes / {PODS} pods: GET /nodes p50 {pct(nodes20, 50):.1f} ms "
            f"p99 {pct(nodes20, 99):.1f} ms (1000 per page: p99 {pct(nodes_all, 99):.1f} ms); "
            f"GET /pools p50 {pct(pools_lat, 50):.1f} ms p99 {pct(pools_lat, 99):.1f} ms "
            "(target p99 <= 200 ms)"
        )
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
        cluster.down(progress=lambda _m: None)


if __name__ == "__main__":
    main()
