"""The controller as a subprocess (`tf-controller`) against the devcluster: GPUs reported
as GPU objects on kwok nodes, fractional pods scheduled and bound, diagnostics, restart."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
import yaml
from controller_testkit import (
    GROUP,
    VERSION,
    ControllerProc,
    create_pod,
    gpus_of,
    pod_manifest,
    wait_bound,
    wait_unschedulable,
)
from kubernetes_asyncio import client


async def test_fractional_pods_share_a_gpu_and_allocation_shows_them(
    controller: ControllerProc, http: httpx.AsyncClient, kube_api: Any, namespace: str, make_pool: Any
) -> None:
    pool = await make_pool(nodes=1, gpus_per_node=1)
    for n in ("a", "b"):
        await create_pod(kube_api, namespace, n, pool.name, tflops_request="40", vram_request="30Gi")
    a, b = await wait_bound(kube_api, namespace, "a"), await wait_bound(kube_api, namespace, "b")
    gpu = pool.gpus[pool.nodes[0]][0]
    assert gpus_of(a) == gpus_of(b) == [gpu]
    assert a.spec.node_name == pool.nodes[0]
    assert (
        a.metadata.annotations["tensor-fusion.ai/index"] != b.metadata.annotations["tensor-fusion.ai/index"]
    )
    state = (await http.get(f"{controller.url}/api/allocation")).json()
    assert set(state) == {"gpuStore", "nodeWorkerStore", "allocation", "gpuToWorkerMap"}
    assert state["gpuStore"][gpu]["status"]["available"] == {"tflops": "20", "vram": "20Gi"}
    assert sorted(w["podName"] for w in state["gpuToWorkerMap"][gpu]) == ["a", "b"]
    assert state["allocation"][a.metadata.uid]["gpuNames"] == [gpu]
    assert state["nodeWorkerStore"][pool.nodes[0]] == {f"{namespace}/a": True, f"{namespace}/b": True}
    # The GPU object's status follows the allocations (batched write).
    custom = client.CustomObjectsApi(kube_api)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        obj = await custom.get_cluster_custom_object(GROUP, VERSION, "gpus", gpu)
        if obj["status"]["available"] == {"tflops": "20", "vram": "20Gi"}:
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError(f"GPU status.available not written: {obj['status']['available']}")
    # A third pod does not fit: it stays Pending with a diagnosis naming the filter.
    await create_pod(kube_api, namespace, "c", pool.name, tflops_request="40", vram_request="30Gi")
    msg = await wait_unschedulable(kube_api, namespace, "c")
    assert "GPUResourceFilter" in msg and pool.name in msg
    for _ in range(50):
        events = await client.CoreV1Api(kube_api).list_namespaced_event(namespace)
        if any(e.reason == "FailedScheduling" and e.involved_object.name == "c" for e in events.items):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("no FailedScheduling event for pod c")
    # Deleting a holder frees room: the pending pod is retried and bound.
    await client.CoreV1Api(kube_api).delete_namespaced_pod("a", namespace, grace_period_seconds=0)
    c = await wait_bound(kube_api, namespace, "c", timeout=30)
    assert gpus_of(c) == [gpu]


async def test_too_big_pod_stays_pending_and_simulate_names_the_filter(
    controller: ControllerProc, http: httpx.AsyncClient, kube_api: Any, namespace: str, make_pool: Any
) -> None:
    pool = await make_pool(nodes=2, gpus_per_node=2)
    await create_pod(kube_api, namespace, "big", pool.name, tflops_request="150", vram_request="10Gi")
    msg = await wait_unschedulable(kube_api, namespace, "big")
    assert "GPUResourceFilter" in msg
    before = (await http.get(f"{controller.url}/api/allocation")).json()["allocation"]
    body = yaml.safe_dump(pod_manifest("big", pool.name, tflops_request="150", vram_request="10Gi"))
    r = await http.post(f"{controller.url}/api/simulate-schedule", content=body)
    assert r.status_code == 200
    out = r.json()
    stages = out["filterDetail"]["FilterStageDetails"]
    assert stages[0]["FilterName"] == "PhaseFilter" and len(stages) == 10
    res = next(s for s in stages if s["FilterName"] == "GPUResourceFilter")
    assert res["Diff"] == 4 and res["After"] == [] and len(res["Before"]) == 4
    err = out["error"]
    assert err["numAllNodes"] == 2
    assert {n["plugin"] for n in err["diagnosis"]["nodeToStatus"]["nodes"].values()} == {"GPUResourceFilter"}
    # A fitting pod: simulate picks a GPU but reserves nothing.
    ok = (
        await http.post(
            f"{controller.url}/api/simulate-schedule",
            json=pod_manifest("small", pool.name, tflops_request="10", vram_request="1Gi"),
        )
    ).json()
    assert ok["error"] is None and ok["scheduleResult"]["suggestedHost"] in pool.nodes
    assert (await http.get(f"{controller.url}/api/allocation")).json()["allocation"] == before


async def test_simulate_rejects_bad_bodies(controller: ControllerProc, http: httpx.AsyncClient) -> None:
    r = await http.post(f"{controller.url}/api/simulate-schedule", content=b"kind: Service\nspec: {}\n")
    assert r.status_code == 400 and "Pod" in r.json()["error"]
    r = await http.post(f"{controller.url}/api/simulate-schedule", content=b"{not yaml: [")
    assert r.status_code == 400
    other = pod_manifest("x", "p", tflops_request="1", vram_request="1Gi")
    other["spec"]["schedulerName"] = "default-scheduler"
    r = await http.post(f"{controller.url}/api/simulate-schedule", json=other)
    assert r.status_code == 500 and r.json() == {"error": "scheduler framework not found"}
    bad = pod_manifest("x", "p", tflops_request="lots", vram_request="1Gi")
    r = await http.post(f"{controller.url}/api/simulate-schedule", json=bad)
    assert r.status_code == 400 and "tensor-fusion.ai/tflops-request" in r.json()["error"]


@pytest.mark.parametrize(
    ("strategy", "expect"),
    [("CompactFirst", "same-gpu"), ("LowLoadFirst", "spread"), ("NodeCompactGPULowLoad", "same-node")],
)
async def test_strategies_place_as_documented(
    controller: ControllerProc,
    http: httpx.AsyncClient,
    kube_api: Any,
    namespace: str,
    make_pool: Any,
    strategy: str,
    expect: str,
) -> None:
    pool = await make_pool(nodes=2, gpus_per_node=2, strategy=strategy)
    placed = []
    for i in range(2):
        await create_pod(kube_api, namespace, f"w{i}", pool.name, tflops_request="10", vram_request="8Gi")
        p = await wait_bound(kube_api, namespace, f"w{i}")  # sequential: the second sees the first
        placed.append((p.spec.node_name, gpus_of(p)[0]))
    (n0, g0), (n1, g1) = placed
    first_node = pool.nodes[0]
    if expect == "same-gpu":
        assert (n0, g0) == (n1, g1) == (first_node, f"{first_node}-gpu-0")
    elif expect == "spread":
        # GPU-level spread: the second pod takes an idle GPU (ties broken by node, then index).
        assert (n0, g0) == (first_node, f"{first_node}-gpu-0")
        assert (n1, g1) == (first_node, f"{first_node}-gpu-1")
    else:
        assert n0 == n1 == first_node and {g0, g1} == {f"{first_node}-gpu-0", f"{first_node}-gpu-1"}


async def test_gpu_count_two_lands_on_one_node(
    controller: ControllerProc, http: httpx.AsyncClient, kube_api: Any, namespace: str, make_pool: Any
) -> None:
    pool = await make_pool(nodes=2, gpus_per_node=2)
    await create_pod(
        kube_api, namespace, "pair", pool.name, tflops_request="60", vram_request="8Gi", gpu_count="2"
    )
    p = await wait_bound(kube_api, namespace, "pair")
    gpus = gpus_of(p)
    assert len(gpus) == 2 and all(g.startswith(p.spec.node_name + "-gpu-") for g in gpus)
    # Only one whole node is left: a second pair fits, a third cannot.
    await create_pod(
        kube_api, namespace, "pair2", pool.name, tflops_request="60", vram_request="8Gi", gpu_count="2"
    )
    p2 = await wait_bound(kube_api, namespace, "pair2")
    assert p2.spec.node_name != p.spec.node_name
    await create_pod(
        kube_api, namespace, "pair3", pool.name, tflops_request="60", vram_request="8Gi", gpu_count="2"
    )
    assert "GPUResourceFilter" in await wait_unschedulable(kube_api, namespace, "pair3")


async def test_quota_exceeded_is_not_scheduled(
    controller: ControllerProc, http: httpx.AsyncClient, kube_api: Any, namespace: str, make_pool: Any
) -> None:
    pool = await make_pool(nodes=1, gpus_per_node=2)
    await client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "gpuresourcequotas",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GPUResourceQuota",
            "metadata": {"name": "q"},
            "spec": {"total": {"requests": {"tflops": "50", "vram": "100Gi"}}},
        },
    )
    await asyncio.sleep(0.5)  # let the quota informer see it
    await create_pod(kube_api, namespace, "q1", pool.name, tflops_request="30", vram_request="1Gi")
    await wait_bound(kube_api, namespace, "q1")
    await create_pod(kube_api, namespace, "q2", pool.name, tflops_request="30", vram_request="1Gi")
    msg = await wait_unschedulable(kube_api, namespace, "q2")
    assert "GPUResourceQuota" in msg and "total.requests.tflops" in msg


async def test_invalid_annotation_is_a_scheduling_error(
    controller: ControllerProc, http: httpx.AsyncClient, kube_api: Any, namespace: str, make_pool: Any
) -> None:
    pool = await make_pool(nodes=1, gpus_per_node=1)
    await create_pod(kube_api, namespace, "bad", pool.name, tflops_request="ten", vram_request="1Gi")
    msg = await wait_unschedulable(kube_api, namespace, "bad")
    assert "tensor-fusion.ai/tflops-request" in msg
    assert (await http.get(f"{controller.url}/healthz")).status_code == 200


async def test_restart_rebuilds_allocations_without_double_booking(
    devcluster: Any, http: httpx.AsyncClient, kube_api: Any, namespace: str, make_pool: Any
) -> None:
    pool = await make_pool(nodes=1, gpus_per_node=1)
    gpu = pool.gpus[pool.nodes[0]][0]
    proc = ControllerProc(str(devcluster.kubeconfig))
    proc.start()
    try:
        await create_pod(kube_api, namespace, "keep", pool.name, tflops_request="60", vram_request="50Gi")
        keep = await wait_bound(kube_api, namespace, "keep")
        proc.stop()
        # While the controller is down a new pod arrives; it must not get the held GPU share.
        await create_pod(kube_api, namespace, "late", pool.name, tflops_request="60", vram_request="50Gi")
        proc.start()
        msg = await wait_unschedulable(kube_api, namespace, "late")
        assert "GPUResourceFilter" in msg
        state = (await http.get(f"{proc.url}/api/allocation")).json()
        assert state["allocation"][keep.metadata.uid]["gpuNames"] == [gpu]
        assert state["gpuStore"][gpu]["status"]["available"] == {"tflops": "40", "vram": "30Gi"}
        fresh = await client.CoreV1Api(kube_api).read_namespaced_pod("keep", namespace)
        assert gpus_of(fresh) == [gpu] and fresh.spec.node_name == keep.spec.node_name
    finally:
        proc.stop()


@pytest.mark.slow
async def test_kill_mid_stream_never_overcommits(
    devcluster: Any, http: httpx.AsyncClient, kube_api: Any, namespace: str, make_pool: Any
) -> None:
    """SIGKILL the controller while a burst is being scheduled; after restart exactly the pods
    that fit are bound and no GPU holds more than its capacity."""
    pool = await make_pool(nodes=1, gpus_per_node=2)  # 2 x 100 TFLOPs
    proc = ControllerProc(str(devcluster.kubeconfig))
    proc.start()
    try:
        for i in range(12):  # 12 x 20 TFLOPs: exactly 10 fit
            await create_pod(kube_api, namespace, f"b{i}", pool.name, tflops_request="20", vram_request="1Gi")
        await asyncio.sleep(0.3)
        assert proc.proc is not None
        proc.proc.kill()
        proc.proc.wait()
        proc.proc = None
        proc.start()
        core = client.CoreV1Api(kube_api)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pods = (await core.list_namespaced_pod(namespace)).items
            if sum(1 for p in pods if p.spec.node_name) == 10:
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # give a wrong extra binding the chance to show up
        pods = (await core.list_namespaced_pod(namespace)).items
        bound = [p for p in pods if p.spec.node_name]
        assert len(bound) == 10
        per_gpu: dict[str, int] = {}
        for p in bound:
            for g in gpus_of(p):
                per_gpu[g] = per_gpu.get(g, 0) + 20
        assert all(v <= 100 for v in per_gpu.values()), per_gpu
        state = (await http.get(f"{proc.url}/api/allocation")).json()
        mine = [
            a["podMeta"]["name"]
            for a in state["allocation"].values()
            if a["podMeta"]["namespace"] == namespace
        ]
        assert sorted(mine) == sorted(p.metadata.name for p in bound)
    finally:
        proc.stop()
