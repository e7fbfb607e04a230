"""gpuctl job API: create latency for 1,000 jobs, then GET /jobs page latency with 10,000 pods.

Runs on its own devcluster ("bench-gpuctl") with a `gpuctl-server` subprocess,
and downs the cluster at the end. Knobs: BENCH_JOBS (1000), BENCH_PODS (10000
gpuctl pods in total), BENCH_PAGES (500 page requests).

Extra pods beyond the jobs' own are created directly, bound to kwok nodes and
labelled like gpuctl job pods, so the list path sees a realistic population
without waiting for 10,000 scheduling decisions.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx

from devcluster.cluster import DevCluster, run_async
from devcluster.k8s_ops import api_client
from devcluster.services import free_port

JOBS = int(os.environ.get("BENCH_JOBS", "1000"))
PODS = int(os.environ.get("BENCH_PODS", "10000"))
PAGES = int(os.environ.get("BENCH_PAGES", "500"))
GPU_NODES = 20


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))] * 1000


def job_doc(i: int) -> str:
    return (
        f"kind: training\nversion: v0.1\njob: {{name: bench-{i:05d}, namespace: bench}}\n"
        "environment: {image: busybox, command: [sleep, '1']}\n"
        "resources: {cpu: 100m, memory: 64Mi, gpu: 0}\n"
    )


async def make_namespace(cluster: DevCluster) -> None:
    from kubernetes_asyncio import client

    api = await api_client(cluster.kubeconfig)
    try:
        await client.CoreV1Api(api).create_namespace(
            body={"metadata": {"name": "bench", "labels": {"runwhere.ai/namespace": "true"}}}
        )
    finally:
        await api.close()


async def make_pods(cluster: DevCluster, count: int) -> float:
    """`count` pods labelled as gpuctl inference pods, spread over the kwok GPU nodes."""
    from kubernetes_asyncio import client

    api = await api_client(cluster.kubeconfig)
    core = client.CoreV1Api(api)
    sem = asyncio.Semaphore(48)
    t0 = time.monotonic()

    async def one(i: int) -> None:
        job = f"filler-{i // 10:04d}"
        body: dict[str, Any] = {
            "metadata": {
                "name": f"{job}-{i % 10}",
                "labels": {
                    "runwhere.ai/job-type": "inference",
                    "runwhere.ai/job-name": job,
                    "runwhere.ai/priority": "medium",
                    "runwhere.ai/namespace": "bench",
                    "app": job,
                },
            },
            "spec": {
                "nodeName": f"gpu-node-{i % GPU_NODES}",
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "main", "image": "busybox"}],
            },
        }
        async with sem:
            await core.create_namespaced_pod("bench", body)

    try:
        for start in range(0, count, 1000):
            await asyncio.gather(*(one(i) for i in range(start, min(count, start + 1000))))
            print(f"  filler pods: {min(count, start + 1000)}/{count}", flush=True)
    finally:
        await api.close()
    return time.monotonic() - t0


def main() -> None:
    cluster = DevCluster("bench-gpuctl")
    cluster.up(gpu_nodes=GPU_NODES, cpu_nodes=4, progress=lambda m: print(f"  {m}", flush=True))
    port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "GPUPLANE_GPUCTL_HTTP_HOST": "127.0.0.1",
        "GPUPLANE_GPUCTL_HTTP_PORT": str(port),
        "GPUPLANE_GPUCTL_LOG_LEVEL": "WARNING",
    }
    exe = os.path.join(os.path.dirname(sys.executable), "gpuctl-server")
    server = subprocess.Popen([exe], env=env)
    try:
        run_async(make_namespace(cluster))
        base = f"http://127.0.0.1:{port}/api/v1"
        with httpx.Client(base_url=base, timeout=60) as c:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if c.get("/jobs", params={"pageSize": 1}).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("gpuctl-server did not start")
                time.sleep(0.2)

            create: list[float] = []
            t0 = time.monotonic()
            for i in range(JOBS):
                t = time.perf_counter()
                r = c.post("/jobs", json={"yamlContent": job_doc(i)})
                create.append(time.perf_counter() - t)
                if r.status_code != 201:
                    raise RuntimeError(f"create {i}: {r.status_code} {r.text}")
            create_wall = time.monotonic() - t0
            print(f"created {JOBS} jobs in {create_wall:.1f}s ({JOBS / create_wall:.0f}/s)")
            print(f"create latency: p50 {pct(create, 50):.1f} ms, p99 {pct(create, 99):.1f} ms")

            filler = max(0, PODS - JOBS)
            took = run_async(make_pods(cluster, filler))
            print(f"created {filler} extra pods in {took:.1f}s")
            deadline = time.monotonic() + 600
            total = 0
            while time.monotonic() < deadline:
                total = c.get("/jobs", params={"pageSize": 1}).json()["total"]
                if total >= PODS:
                    break
                time.sleep(1)
            print(f"pods listed by gpuctl: {total}")
            # Measure a settled cluster: wait until kwok has started every pod (no Pending left).
            settle = time.monotonic()
            while time.monotonic() - settle < 300:
                if c.get("/jobs", params={"status": "Pending", "pageSize": 1}).json()["total"] == 0:
                    break
                time.sleep(1)
            print(f"settled (no Pending pods) after {time.monotonic() - settle:.1f}s")

            pages = max(1, total // 100)
            lat: list[float] = []
            for _ in range(PAGES):
                p = random.randint(1, pages)
                t = time.perf_counter()
                r = c.get("/jobs", params={"page": p, "pageSize": 100})
                lat.append(time.perf_counter() - t)
                assert r.status_code == 200 and len(r.json()["items"]) == 100
            filt: list[float] = []
            for _ in range(PAGES // 5):
                t = time.perf_counter()
                q = {"kind": "inference", "status": "running", "pageSize": 100, "page": random.randint(1, 50)}
                r = c.get("/jobs", params=q)
                filt.append(time.perf_counter() - t)
                assert r.status_code == 200
            mean = statistics.mean(lat) * 1000
            print(
                f"GET /jobs page of 100 ({total} pods): p50 {pct(lat, 50):.1f} ms, p99 {pct(lat, 99):.1f} ms"
            )
            print(f"GET /jobs page of 100: mean {mean:.1f} ms")
            print(f"GET /jobs filtered (kind+status): p50 {pct(filt, 50):.1f} ms, p99 {pct(filt, 99):.1f} ms")
        print(
            f"SUMMARY: {JOBS} creates p50 {pct(create, 50):.1f} ms p99 {pct(create, 99):.1f} ms; "
            f"GET /jobs page of 100 with {total} pods p50 {pct(lat, 50):.1f} ms p99 {pct(lat, 99):.1f} ms "
            f"(target p99 <= 100 ms)"
        )
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        cluster.down(progress=lambda _m: None)


if __name__ == "__main__":
    main()
