"""Helpers shared by the fault tests: pools the controller can place on, waits, SIGKILL."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from controller_testkit import GpuPool, pod_manifest
from kubernetes_asyncio import client

from devcluster.k8s_ops import create_node, wait_nodes_ready
from devcluster.nodes import NodeShape, gpu_node

GPU_IDS = "tensor-fusion.ai/gpu-ids"
INDEX = "tensor-fusion.ai/index"


async def make_pool(api: Any, nodes: int, gpus_per_node: int, **kw: Any) -> GpuPool:
    """Fresh kwok nodes labelled for a fresh pool, with GPU objects as a hypervisor reports them."""
    name = f"p-{secrets.token_hex(3)}"
    core = client.CoreV1Api(api)
    names = [f"{name}-n{i}" for i in range(nodes)]
    for n in names:
        await create_node(core, gpu_node(n, NodeShape(gpus=gpus_per_node), {"test-pool": name}))
    await wait_nodes_ready(api, names, lambda _m: None, timeout=60)
    pool = GpuPool(api, name, names)
    await pool.create(gpus_per_node, **kw)
    return pool


async def delete_pool(api: Any, pool: GpuPool) -> None:
    await pool.delete()
    core = client.CoreV1Api(api)
    for n in pool.nodes:
        try:
            await core.delete_node(n)
        except client.ApiException:
            pass


async def wait_placeable(url: str, pool: GpuPool, timeout: float = 60) -> None:
    """Until the controller knows every GPU of the pool and a tiny pod fits on each node."""
    want = {g for gpus in pool.gpus.values() for g in gpus}
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=5) as http:
        while True:
            missing: set[str] | list[str] = want
            try:
                store = (await http.get(f"{url}/api/allocation")).json()["gpuStore"]
                missing = want - set(store)
                if not missing:
                    missing = [n for n in pool.nodes if not await _fits_on(http, url, pool, n)]
            except httpx.HTTPError:
                pass
            if not missing:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"controller cannot place on {sorted(missing)} after {timeout}s")
            await asyncio.sleep(0.2)


async def _fits_on(http: httpx.AsyncClient, url: str, pool: GpuPool, node: str) -> bool:
    probe = pod_manifest("probe", pool.name, tflops_request="1", vram_request="1Mi")
    probe["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    r = await http.post(f"{url}/api/simulate-schedule", json=probe)
    return r.status_code == 200 and r.json()["error"] is None


async def bounded(coros: list[Awaitable[Any]], limit: int = 32) -> list[Any]:
    sem = asyncio.Semaphore(limit)

    async def one(c: Awaitable[Any]) -> Any:
        async with sem:
            return await c

    return list(await asyncio.gather(*(one(c) for c in coros)))


async def wait_for(
    check: Callable[[], Awaitable[Any]], timeout: float, what: str, interval: float = 0.3
) -> Any:
    """Poll `check` until it returns something truthy; its last value names the failure."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"{what} not reached in {timeout}s (last: {last!r})")


def kill9(proc: Any) -> None:
    """SIGKILL a ServiceProcess (no shutdown hooks run) and forget it, ports kept for a restart."""
    assert proc.proc is not None
    proc.proc.kill()
    proc.proc.wait()
    proc.proc = None


async def assert_bound_once(
    api: Any, url: str, namespace: str, pool: GpuPool, tflops: int, vram_gi: int
) -> None:
    """What must hold after a fault in scheduling: every pod of `namespace` is bound to one node
    with GPUs of that node, no GPU is over its 100 TFLOPs / 80 GiB, node indices never repeat,
    and the controller's `/api/allocation` holds exactly what the pod annotations say, once."""
    core = client.CoreV1Api(api)
    gpu_node = {g: n for n, gpus in pool.gpus.items() for g in gpus}
    pods = (await core.list_namespaced_pod(namespace)).items
    used_t: Counter[str] = Counter()
    used_v: Counter[str] = Counter()
    indices: dict[str, list[int]] = defaultdict(list)
    want: dict[str, tuple[str, list[str]]] = {}
    for p in pods:
        ann = p.metadata.annotations or {}
        ids = ann.get(GPU_IDS, "").split(",")
        assert p.spec.node_name and ids != [""], f"{p.metadata.name} is not bound with GPUs"
        assert len(ids) == 1 and gpu_node.get(ids[0]) == p.spec.node_name, (
            f"{p.metadata.name}: GPUs {ids} are not on its node {p.spec.node_name}"
        )
        used_t[ids[0]] += tflops
        used_v[ids[0]] += vram_gi
        indices[p.spec.node_name].append(int(ann[INDEX]))
        want[p.metadata.uid] = (p.spec.node_name, ids)
    over = {g: (used_t[g], used_v[g]) for g in used_t if used_t[g] > 100 or used_v[g] > 80}
    assert not over, f"GPUs over capacity (TFLOPs, GiB): {over}"
    dup = {n: [i for i, c in Counter(ix).items() if c > 1] for n, ix in indices.items()}
    assert not any(dup.values()), f"index used twice on a node: {dup}"

    async with httpx.AsyncClient(timeout=10) as http:
        state = (await http.get(f"{url}/api/allocation")).json()
    mine = {
        uid: (a["nodeName"], a["gpuNames"])
        for uid, a in state["allocation"].items()
        if a["podMeta"]["namespace"] == namespace
    }
    assert mine == want, "the controller's allocation differs from the pods' annotations"
    workers = Counter(w["podUID"] for g in gpu_node for w in state["gpuToWorkerMap"].get(g, []))
    assert workers == Counter(want.keys()), "a pod is held on a GPU more (or less) than once"
    for g in gpu_node:
        avail = state["gpuStore"][g]["status"]["available"]
        assert avail == {"tflops": str(100 - used_t[g]), "vram": f"{80 - used_v[g]}Gi"}, (g, avail)

    # The controller persists the same availability on the GPU objects.
    custom = client.CustomObjectsApi(api)

    async def gpu_objects_agree() -> bool:
        for g in gpu_node:
            o = await custom.get_cluster_custom_object("tensor-fusion.ai", "v1", "gpus", g)
            if o["status"]["available"] != {"tflops": str(100 - used_t[g]), "vram": f"{80 - used_v[g]}Gi"}:
                return False
        return True

    await wait_for(gpu_objects_agree, 30, "GPU objects' status.available matching the pods")


async def count_bound(api: Any, namespace: str) -> int:
    pods = (await client.CoreV1Api(api).list_namespaced_pod(namespace)).items
    return sum(1 for p in pods if p.spec.node_name)
