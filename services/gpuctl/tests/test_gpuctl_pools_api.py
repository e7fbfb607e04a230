"""Pools and nodes against the devcluster: real kwok GPU nodes, real pods, concrete numbers."""

from __future__ import annotations

import secrets
from typing import Any

import httpx
from gpuctl_helpers import eventually, job_yaml
from kubernetes_asyncio import client


def pool_name() -> str:
    return f"p-{secrets.token_hex(3)}"


async def pool_of(api: httpx.AsyncClient, name: str) -> dict[str, Any] | None:
    r = await api.get("/pools")
    assert r.status_code == 200, r.text
    return next((p for p in r.json() if p["name"] == name), None)


async def test_pool_numbers_follow_real_gpu_requests(
    api: httpx.AsyncClient, make_gpu_nodes: Any, namespace: str
) -> None:
    a100 = await make_gpu_nodes(2, gpus=8, model="A100")
    pool = pool_name()
    r = await api.post("/pools", json={"name": pool, "description": "team A", "nodes": a100})
    assert r.status_code == 201, r.text
    created = r.json()
    assert (created["gpuTotal"], created["gpuUsed"], created["gpuFree"]) == (16, 0, 16)
    assert created["gpuType"] == ["A100"] and created["description"] == "team A"
    assert created["status"] == "active" and created["nodes"] == sorted(a100)

    # 3 GPUs requested by a running job in the pool (2 + 1 on two replicas would also do)
    doc = job_yaml("inference", "use3", namespace, gpu=3, service="service: {port: 8000}").replace(
        "gpu: 3}", f"gpu: 3, pool: {pool}}}"
    )
    assert (await api.post("/jobs", json={"yamlContent": doc})).status_code == 201

    # The pool counts the 3 GPUs as soon as the pod exists (pending pods bound for the pool
    # count too); wait until the pod sits on one of the pool's nodes.
    async def on_a_node() -> dict[str, Any] | None:
        d = (await api.get(f"/pools/{pool}")).json()
        return d if sorted(n["gpuUsed"] for n in d["nodeDetails"]) == [0, 3] else None

    detail = await eventually(on_a_node, 45, "the pod to be placed on a pool node")
    assert (detail["gpuTotal"], detail["gpuUsed"], detail["gpuFree"]) == (16, 3, 13)
    assert detail["jobs"] == [f"{namespace}/use3"]
    p = await pool_of(api, pool)
    assert p is not None and (p["gpuTotal"], p["gpuUsed"], p["gpuFree"]) == (16, 3, 13)

    # the node list, filtered by pool and GPU type, carries the same numbers and real cpu/memory
    nodes = (await api.get("/nodes", params={"pool": pool, "gpuType": "A100"})).json()
    assert nodes["total"] == 2
    busy = next(n for n in nodes["items"] if n["gpuUsed"] == 3)
    assert busy["gpuFree"] == 5 and busy["boundPools"] == [pool] and busy["gpuType"] == "A100"
    assert busy["cpu"]["requested"] == "1" and busy["memory"]["requested"] == "1Gi"
    assert busy["cpu"]["allocatable"] not in (None, "0", "unknown") and busy["status"] == "Ready"

    node = (await api.get(f"/nodes/{busy['nodeName']}")).json()
    assert node["labels"]["runwhere.ai/pool"] == pool
    assert [p["gpu"] for p in node["pods"]] == [3] and node["pods"][0]["namespace"] == namespace

    gd = (await api.get("/nodes/gpu-detail", params={"nodeName": busy["nodeName"]})).json()
    assert gd["controller"] == "not configured"
    gpus = gd["items"][0]["gpus"]
    assert len(gpus) == 8 and gd["items"][0]["source"] == "requests"
    assert sum(g["allocated"] for g in gpus) == 3 and all(g["model"] == "A100" for g in gpus)
    assert gpus[0]["memory"] and gpus[0]["pods"][0].startswith(f"{namespace}/use3-")

    # a pool with running jobs cannot be deleted
    r = await api.delete(f"/pools/{pool}")
    assert r.status_code == 409 and f"{namespace}/use3" in r.json()["error"]

    assert (
        await api.delete("/jobs/use3", params={"namespace": namespace, "force": "true"})
    ).status_code == 200

    async def freed() -> bool:
        p = await pool_of(api, pool)
        return p is not None and (p["gpuUsed"], p["gpuFree"]) == (0, 16)

    await eventually(freed, 45, "the deleted job's GPUs to be free again")
    r = await api.delete(f"/pools/{pool}")
    assert r.status_code == 200 and r.json()["nodes"] == sorted(a100)
    assert await pool_of(api, pool) is None
    labels = (await api.get(f"/nodes/{a100[0]}/labels")).json()["labels"]
    assert "runwhere.ai/pool" not in labels


async def test_node_filters_and_pagination(api: httpx.AsyncClient, make_gpu_nodes: Any) -> None:
    a100 = await make_gpu_nodes(2, gpus=4, model="A100")
    h100 = await make_gpu_nodes(1, gpus=8, model="H100")
    pool = pool_name()
    assert (await api.post("/pools", json={"name": pool, "nodes": [*a100, *h100]})).status_code == 201
    r = (await api.get("/nodes", params={"pool": pool, "gpuType": "A100"})).json()
    assert [n["nodeName"] for n in r["items"]] == sorted(a100)
    assert {n["gpuTotal"] for n in r["items"]} == {4}
    p = await pool_of(api, pool)
    assert p is not None and p["gpuTotal"] == 16 and p["gpuType"] == ["A100", "H100"]

    page1 = (await api.get("/nodes", params={"pool": pool, "pageSize": 2, "page": 1})).json()
    page2 = (await api.get("/nodes", params={"pool": pool, "pageSize": 2, "page": 2})).json()
    assert page1["total"] == page2["total"] == 3
    names = [n["nodeName"] for n in page1["items"] + page2["items"]]
    assert names == sorted([*a100, *h100])
    assert (await api.get("/nodes", params={"pool": pool, "status": "notready"})).json()["total"] == 0
    assert (await api.get("/nodes", params={"pool": pool, "status": "Ready"})).json()["total"] == 3
    assert (await api.delete(f"/pools/{pool}")).status_code == 200


async def test_join_and_leave_pool(api: httpx.AsyncClient, make_gpu_nodes: Any) -> None:
    n1, n2 = await make_gpu_nodes(2, gpus=2, model="A100")
    pool = pool_name()
    assert (await api.post("/pools", json={"name": pool, "nodes": [n1]})).status_code == 201
    r = await api.post(f"/nodes/{n2}/pools", json={"pool": pool})
    assert r.status_code == 201, r.text
    p = await pool_of(api, pool)
    assert p is not None and p["nodes"] == sorted([n1, n2]) and p["gpuTotal"] == 4

    other = pool_name()
    r = await api.post(f"/nodes/{n2}/pools", json={"pool": other})
    assert r.status_code == 409 and pool in r.json()["error"]
    r = await api.delete(f"/nodes/{n2}/pools/{other}")
    assert r.status_code == 404
    assert (await api.delete(f"/nodes/{n2}/pools/{pool}")).status_code == 200
    p = await pool_of(api, pool)
    assert p is not None and p["nodes"] == [n1]
    assert (await api.post("/nodes/nope-node/pools", json={"pool": pool})).status_code == 404
    assert (await api.delete(f"/pools/{pool}")).status_code == 200


async def test_pool_error_paths(api: httpx.AsyncClient, make_gpu_nodes: Any) -> None:
    (n1,) = await make_gpu_nodes(1, gpus=2, model="A100")
    pool = pool_name()
    r = await api.post("/pools", json={"name": pool, "nodes": [n1, "no-such-node"]})
    assert r.status_code == 404 and r.json()["error"] == "node no-such-node not found"
    assert (await pool_of(api, pool)) is None  # nothing was changed
    r = await api.post("/pools", json={"name": pool, "nodes": [n1], "gpuType": ["H100"]})
    assert r.status_code == 400 and "A100" in r.json()["error"]
    r = await api.post("/pools", json={"name": "Bad Name!", "nodes": [n1]})
    assert r.status_code == 400 and "name" in r.json()["error"]
    r = await api.post("/pools", json={"name": pool, "nodes": []})
    assert r.status_code == 400
    r = await api.post("/pools", json={"name": pool, "nodes": [n1], "typo": 1})
    assert r.status_code == 400 and "typo" in r.json()["error"]
    assert (await api.post("/pools", json={"name": pool, "nodes": [n1]})).status_code == 201
    r = await api.post("/pools", json={"name": pool, "nodes": [n1]})
    assert r.status_code == 409 and r.json()["error"] == f"pool {pool} already exists"
    assert (await api.get("/pools/no-such-pool")).status_code == 404
    r = await api.delete("/pools/no-such-pool")
    assert r.status_code == 404 and r.json()["error"] == "pool no-such-pool not found"
    assert (await api.get("/nodes/no-such-node")).status_code == 404
    assert (await api.get("/nodes", params={"pageSize": 0})).status_code == 400
    assert (await api.delete(f"/pools/{pool}")).status_code == 200


async def test_cpu_node_has_no_gpus_and_is_not_in_gpu_detail(api: httpx.AsyncClient, kube_api: Any) -> None:
    r = (await api.get("/nodes/cpu-node-0")).json()
    assert r["gpuTotal"] == 0 and r["cpu"]["capacity"] == "32" and r["memory"]["capacity"] == "128Gi"
    gd = (await api.get("/nodes/gpu-detail")).json()
    names = {i["nodeName"] for i in gd["items"]}
    assert "cpu-node-0" not in names and {"gpu-node-0", "gpu-node-1"} <= names
    core = client.CoreV1Api(kube_api)
    assert (await core.read_node("gpu-node-0")).metadata.name == "gpu-node-0"
