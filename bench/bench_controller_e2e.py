"""End to end: the controller schedules fractional pods through the apiserver, then
kube-scheduler schedules whole-GPU pods (`nvidia.com/gpu: 1`) on the same cluster.

Defaults (issue 3): 1,000 kwok nodes x 8 GPUs, 5,000 pods each. Prints pods/s and
p50/p99 time-to-bind for both, and the ratio controller/kube-scheduler (target >= 1.0).
Uses its own cluster ("bench-controller") and removes it at the end.
Knobs: BENCH_NODES, BENCH_PODS, BENCH_KEEP=1 (keep the cluster), BENCH_CLUSTER (its name).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx
from kubernetes_asyncio import client, watch

from devcluster.cluster import DevCluster, run_async
from devcluster.k8s_ops import api_client
from devcluster.services import free_port

NODES = int(os.environ.get("BENCH_NODES", "1000"))
PODS = int(os.environ.get("BENCH_PODS", "5000"))
GROUP, VERSION = "tensor-fusion.ai", "v1"
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
CONCURRENCY = 64


async def _gather_limited(coros: list[Any]) -> None:
    sem = asyncio.Semaphore(CONCURRENCY)

    async def run(c: Any) -> None:
        async with sem:
            await c

    await asyncio.gather(*(run(c) for c in coros))


async def create_gpus(api: Any) -> None:
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    nodes = [
        n.metadata.name for n in (await core.list_node(label_selector="nvidia.com/gpu.present=true")).items
    ]
    await custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "gpupools",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GPUPool",
            "metadata": {"name": "bench"},
            "spec": {
                "nodeManagerConfig": {
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
                                ]
                            }
                        ]
                    }
                }
            },
        },
    )

    async def one(node: str, i: int) -> None:
        name = f"{node}-gpu-{i}"
        await custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            "gpus",
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPU", "metadata": {"name": name}},
        )
        await custom.patch_cluster_custom_object_status(
            GROUP,
            VERSION,
            "gpus",
            name,
            {
                "status": {
                    "phase": "Running",
                    "vendor": "NVIDIA",
                    "model": "H100",
                    "uuid": name,
                    "index": i,
                    "capacity": {"tflops": "989", "vram": "80Gi"},
                    "available": {"tflops": "989", "vram": "80Gi"},
                    "nodeSelector": {"kubernetes.io/hostname": node},
                }
            },
            _content_type="application/merge-patch+json",
        )

    await _gather_limited([one(n, i) for n in nodes for i in range(8)])


def pod(name: str, fractional: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"tolerations": [TOLERATION], "containers": [{"name": "main", "image": "busybox"}]}
    meta: dict[str, Any] = {"name": name}
    if fractional:
        spec["schedulerName"] = "tensor-fusion-scheduler"
        meta["annotations"] = {
            "tensor-fusion.ai/gpupool": "bench",
            "tensor-fusion.ai/tflops-request": "100",
            "tensor-fusion.ai/vram-request": "8Gi",
        }
        meta["labels"] = {"tensor-fusion.ai/enabled": "true"}
    else:
        spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


async def run_batch(api: Any, ns: str, prefix: str, fractional: bool) -> tuple[float, list[float]]:
    """Create PODS pods; return (wall seconds until all bound, per-pod create->bind seconds)."""
    core = client.CoreV1Api(api)
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    done = asyncio.Event()

    async def watcher() -> None:
        while True:
            try:
                w = watch.Watch()
                async with w.stream(core.list_namespaced_pod, ns, timeout_seconds=600) as stream:
                    async for ev in stream:
                        p = ev["object"]
                        name = p.metadata.name
                        if name.startswith(prefix + "-") and p.spec.node_name and name not in bound:
                            bound[name] = time.monotonic()
                            if len(bound) == PODS:
                                done.set()
                                return
            except Exception as e:  # a bench: report and re-watch (bound pods are re-listed as ADDED)
                print(f"  watch error {type(e).__name__}: {e}", flush=True)
                await asyncio.sleep(0.5)

    wt = asyncio.ensure_future(watcher())
    await asyncio.sleep(0.5)
    t0 = time.monotonic()

    async def make(i: int) -> None:
        name = f"{prefix}-{i}"
        created[name] = time.monotonic()
        await core.create_namespaced_pod(ns, pod(name, fractional))
        if len(created) % 1000 == 0:
            print(f"    {len(created)} created, {len(bound)} bound", flush=True)

    await _gather_limited([make(i) for i in range(PODS)])
    while not done.is_set():
        try:
            await asyncio.wait_for(done.wait(), timeout=10)
        except TimeoutError:
            print(f"    {len(bound)}/{PODS} bound after {time.monotonic() - t0:.0f}s", flush=True)
    wall = max(bound.values()) - t0
    wt.cancel()
    return wall, sorted(bound[n] - created[n] for n in bound)


def _pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def _start_controller(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "tf-controller")], env=env)


async def bench(cluster: DevCluster) -> None:
    api = await api_client(cluster.kubeconfig)
    port, gport = free_port(), free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "GPUPLANE_CONTROLLER_HTTP_HOST": "127.0.0.1",
        "GPUPLANE_CONTROLLER_HTTP_PORT": str(port),
        "GPUPLANE_CONTROLLER_GRPC_PORT": str(gport),
        "GPUPLANE_CONTROLLER_LOG_LEVEL": "WARNING",
        # One replica, like the devcluster's kube-scheduler (--leader-elect=false): on this loaded
        # apiserver a lease renewal can take longer than the renew deadline, and a leader that
        # steps down stops binding until it wins the lease again, which would measure the lease.
        "GPUPLANE_CONTROLLER_LEADER_ELECT": "false",
    }
    proc = _start_controller(env)
    try:
        t0 = time.monotonic()
        await create_gpus(api)
        print(f"  {NODES * 8} GPU objects created in {time.monotonic() - t0:.1f}s", flush=True)
        async with httpx.AsyncClient(timeout=30) as http:
            while True:
                try:
                    r = await http.get(f"http://127.0.0.1:{port}/api/allocation")
                    if r.status_code == 200 and len(r.json()["gpuStore"]) >= NODES * 8:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(1)
        core = client.CoreV1Api(api)
        await core.create_namespace({"metadata": {"name": "bench"}})
        print(
            f"  controller sees all GPUs after {time.monotonic() - t0:.1f}s; scheduling {PODS} pods",
            flush=True,
        )
        tf_wall, tf_lat = await run_batch(api, "bench", "tf", True)
        print(
            f"  controller:     {PODS / tf_wall:7.1f} pods/s, "
            f"time-to-bind p50 {statistics.median(tf_lat):.2f}s p99 {_pct(tf_lat, 0.99):.2f}s",
            flush=True,
        )
        ks_wall, ks_lat = await run_batch(api, "bench", "ks", False)
        print(
            f"  kube-scheduler: {PODS / ks_wall:7.1f} pods/s, "
            f"time-to-bind p50 {statistics.median(ks_lat):.2f}s p99 {_pct(ks_lat, 0.99):.2f}s",
            flush=True,
        )
        ratio = ks_wall / tf_wall
        print(
            f"SUMMARY: {NODES} nodes x 8 GPUs, {PODS} pods: controller {PODS / tf_wall:.0f} pods/s "
            f"(p99 bind {_pct(tf_lat, 0.99):.2f}s) vs kube-scheduler {PODS / ks_wall:.0f} pods/s; "
            f"ratio {ratio:.2f} (target >= 1.0)"
        )
    finally:
        proc.terminate()
        proc.wait(30)
        await api.close()


def main() -> None:
    cluster = DevCluster(os.environ.get("BENCH_CLUSTER", "bench-controller"))
    cluster.up(
        gpu_nodes=NODES,
        gpus_per_node=8,
        gpu_model="H100",
        cpu_nodes=0,
        progress=lambda m: print(f"  {m}", flush=True),
    )
    try:
        run_async(bench(cluster))
    finally:
        if os.environ.get("BENCH_KEEP") != "1":
            cluster.down(progress=lambda _m: None)


if __name__ == "__main__":
    main()
