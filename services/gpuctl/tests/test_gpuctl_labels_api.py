"""Node label endpoints against the devcluster: every success and documented error path."""

from __future__ import annotations

from typing import Any

import httpx
from kubernetes_asyncio import client


async def test_label_lifecycle(api: httpx.AsyncClient, make_gpu_nodes: Any, kube_api: Any) -> None:
    (node,) = await make_gpu_nodes(1, gpus=2, model="A100")
    core = client.CoreV1Api(kube_api)

    r = await api.post(f"/nodes/{node}/labels", json={"key": "team", "value": "alpha"})
    assert r.status_code == 201 and r.json() == {"nodeName": node, "key": "team", "value": "alpha"}
    assert (await core.read_node(node)).metadata.labels["team"] == "alpha"

    r = await api.post(f"/nodes/{node}/labels", json={"key": "team", "value": "beta"})
    assert r.status_code == 409 and "overwrite" in r.json()["error"]
    r = await api.post(f"/nodes/{node}/labels", json={"key": "team", "value": "beta", "overwrite": True})
    assert r.status_code == 201
    r = await api.get(f"/nodes/{node}/labels/team")
    assert r.json() == {"nodeName": node, "key": "team", "value": "beta"}

    # prefixed keys travel in the path
    r = await api.put(f"/nodes/{node}/labels/example.com/rack", json={"value": "r1"})
    assert r.status_code == 404  # update needs an existing label
    assert (
        await api.post(f"/nodes/{node}/labels", json={"key": "example.com/rack", "value": "r1"})
    ).status_code == 201
    r = await api.put(f"/nodes/{node}/labels/example.com/rack", json={"value": "r2"})
    assert r.status_code == 200 and (await core.read_node(node)).metadata.labels["example.com/rack"] == "r2"
    all_labels = (await api.get(f"/nodes/{node}/labels")).json()["labels"]
    assert all_labels["example.com/rack"] == "r2" and all_labels["runwhere.ai/gpu-type"] == "A100"

    overview = (await api.get("/labels")).json()
    assert "beta" in overview["team"] and {"A100", "H100"} <= set(overview["runwhere.ai/gpu-type"])
    q = (await api.get("/nodes/labels", params={"key": "team"})).json()
    assert {"nodeName": node, "value": "beta"} in q["items"]

    r = await api.delete(f"/nodes/{node}/labels/example.com/rack")
    assert r.status_code == 200
    assert "example.com/rack" not in (await core.read_node(node)).metadata.labels
    r = await api.delete(f"/nodes/{node}/labels/example.com/rack")
    assert r.status_code == 404 and r.json()["error"] == f"label example.com/rack not found on node {node}"
    assert (await api.get(f"/nodes/{node}/labels/example.com/rack")).status_code == 404


async def test_label_validation_and_protected_keys(api: httpx.AsyncClient, make_gpu_nodes: Any) -> None:
    (node,) = await make_gpu_nodes(1, gpus=2, model="A100")
    bad = [
        ({"key": "-bad", "value": "x"}, "key"),
        ({"key": "Bad_Prefix/x", "value": "x"}, "prefix"),
        ({"key": "a" * 64, "value": "x"}, "63"),
        ({"key": "ok", "value": "has space"}, "value"),
        ({"key": "ok", "value": "v" * 64}, "value"),
    ]
    for body, word in bad:
        r = await api.post(f"/nodes/{node}/labels", json=body)
        assert r.status_code == 400, (body, r.text)
        assert word in r.json()["error"], (body, r.json())
    for key in ("kubernetes.io/hostname", "node-role.kubernetes.io/worker", "topology.kubernetes.io/zone"):
        r = await api.post(f"/nodes/{node}/labels", json={"key": key, "value": "x", "overwrite": True})
        assert r.status_code == 403 and "system label" in r.json()["error"], key
    r = await api.delete(f"/nodes/{node}/labels/kubernetes.io/hostname")
    assert r.status_code == 403
    assert (await api.get("/nodes/labels")).status_code == 400  # key is required
    r = await api.post("/nodes/no-such-node/labels", json={"key": "team", "value": "x"})
    assert r.status_code == 404 and r.json()["error"] == "node no-such-node not found"


async def test_batch_labels_report_each_node(api: httpx.AsyncClient, make_gpu_nodes: Any) -> None:
    n1, n2 = await make_gpu_nodes(2, gpus=2, model="A100")
    assert (await api.post(f"/nodes/{n2}/labels", json={"key": "zone", "value": "old"})).status_code == 201
    r = await api.post(
        "/nodes/labels/batch",
        json={"nodeNames": [n1, n2, "no-such-node"], "labels": {"zone": "z1", "tier": "gold"}},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] == [{"nodeName": n1, "labels": {"zone": "z1", "tier": "gold"}}]
    failed = {f["nodeName"]: f for f in body["failed"]}
    assert failed[n2]["status"] == 409 and failed["no-such-node"]["status"] == 404
    r = await api.post(
        "/nodes/labels/batch",
        json={"nodeNames": [n1, n2], "labels": {"zone": "z2"}, "overwrite": True},
    )
    assert [s["nodeName"] for s in r.json()["success"]] == [n1, n2]
    r = await api.post("/nodes/labels/batch", json={"nodeNames": [n1], "labels": {"kubernetes.io/os": "x"}})
    assert r.status_code == 403


async def test_gpu_related_labels_with_pools(api: httpx.AsyncClient, make_gpu_nodes: Any) -> None:
    (node,) = await make_gpu_nodes(1, gpus=2, model="A100")
    assert (await api.post(f"/nodes/{node}/pools", json={"pool": "lbl-pool"})).status_code == 201
    items = (await api.get("/nodes/labels/all")).json()["items"]
    mine = next(i for i in items if i["nodeName"] == node)
    assert mine["boundPools"] == ["lbl-pool"] and mine["gpuType"] == "A100"
    assert mine["labels"]["runwhere.ai/gpu-type"] == "A100"
    assert mine["labels"]["nvidia.com/gpu.count"] == "2"
    assert "kubernetes.io/hostname" not in mine["labels"]
