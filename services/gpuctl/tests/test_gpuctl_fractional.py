"""Fractional-GPU jobs: admitted only after the real controller's SimulateSchedule says they can fit."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from gpuctl_helpers import (
    ServerThread,
    create_gpu_pool,
    delete_gpu_pool,
    eventually,
    make_settings,
)
from kubernetes_asyncio import client

from devcluster.services import ServiceProcess, free_port


@pytest.fixture(scope="module")
def controller(devcluster: Any) -> Iterator[ServiceProcess]:
    with ServiceProcess.controller(devcluster.kubeconfig) as proc:
        yield proc


@pytest.fixture(scope="module")
def frac_url(devcluster: Any, controller: ServiceProcess) -> Iterator[str]:
    with ServerThread(make_settings(devcluster, controller_address=controller.grpc_target)) as url:
        yield url


async def _controller_can_place(controller: ServiceProcess, pool: str) -> None:
    """Wait until the controller's informers have the new node (Ready) and GPUs: a tiny pod fits."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": "default", "annotations": {
            "tensor-fusion.ai/gpupool": pool, "tensor-fusion.ai/tflops-request": "1",
            "tensor-fusion.ai/vram-request": "1Mi"}},
        "spec": {"schedulerName": "tensor-fusion-scheduler", "containers": [{"name": "m", "image": "x"}],
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }  # fmt: skip
    # Only the toleration gpuctl's pods carry: a busy machine's node can carry a transient
    # not-ready/unreachable taint that a blanket toleration would hide from this probe.

    async def fits() -> bool:
        async with httpx.AsyncClient(timeout=10) as c:
            r = await c.post(f"{controller.url}/api/simulate-schedule", json=probe)
        return r.status_code == 200 and r.json()["error"] is None

    await eventually(fits, 30, f"the controller to see pool {pool} ready")


@pytest.fixture
async def pool(
    kube_api: Any, make_gpu_nodes: Any, controller: ServiceProcess
) -> AsyncIterator[tuple[str, list[str]]]:
    name = f"gp-{secrets.token_hex(3)}"
    nodes = await make_gpu_nodes(1, labels={"test-pool": name})
    gpus = await create_gpu_pool(kube_api, name, nodes, tflops="100", vram="80Gi", per_node=2)
    await _controller_can_place(controller, name)
    yield name, nodes
    await delete_gpu_pool(kube_api, name, gpus)


def frac_yaml(name: str, ns: str, pool: str, share: str) -> str:
    return (
        f"kind: inference\nversion: v0.1\njob: {{name: {name}, namespace: {ns}}}\n"
        "environment: {image: vllm/vllm-openai:latest}\n"
        f"resources: {{pool: {pool}, cpu: 1, memory: 1Gi, gpuShare: {share}}}\n"
        "service: {port: 8000}\n"
    )


async def post(url: str, text: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url + "/api/v1", timeout=30) as c:
        return await c.post("/jobs", json={"yamlContent": text})


async def test_impossible_share_is_refused_naming_the_filter(
    frac_url: str, namespace: str, pool: tuple[str, list[str]], kube_api: Any
) -> None:
    name, _ = pool

    async def refused() -> httpx.Response | None:
        r = await post(frac_url, frac_yaml("too-big", namespace, name, "{tflops: 500, vram: 10Gi}"))
        return r if r.status_code == 422 else None  # the controller's informer may still be catching up

    r = await eventually(refused, 20, "422 for an impossible share")
    err = r.json()["error"]
    assert err.startswith("gpuShare can never be scheduled") and "(filter " in err
    with pytest.raises(client.ApiException):
        await client.AppsV1Api(kube_api).read_namespaced_deployment("too-big", namespace)


async def test_possible_share_is_created_and_bound_by_the_controller(
    frac_url: str, namespace: str, pool: tuple[str, list[str]], kube_api: Any
) -> None:
    name, nodes = pool

    async def admitted() -> httpx.Response | None:
        r = await post(frac_url, frac_yaml("fits", namespace, name, "{tflops: 40, vram: 8Gi, qos: high}"))
        return r if r.status_code == 201 else None

    r = await eventually(admitted, 20, "201 for a share that fits")
    assert "fits now on" in r.json()["message"]
    core = client.CoreV1Api(kube_api)

    async def bound() -> Any:
        pods = (await core.list_namespaced_pod(namespace, label_selector="runwhere.ai/job-name=fits")).items
        return pods[0] if pods and pods[0].spec.node_name else None

    pod = await eventually(bound, 30, "the fractional pod bound by tensor-fusion-scheduler")
    assert pod.spec.node_name == nodes[0]
    assert pod.spec.scheduler_name == "tensor-fusion-scheduler"
    assert pod.metadata.annotations["tensor-fusion.ai/tflops-request"] == "40"


async def test_busy_share_is_created_and_waits(
    frac_url: str, namespace: str, pool: tuple[str, list[str]], kube_api: Any
) -> None:
    name, _ = pool
    core = client.CoreV1Api(kube_api)

    async def bound(job: str) -> Any:
        pods = (await core.list_namespaced_pod(namespace, label_selector=f"runwhere.ai/job-name={job}")).items
        return pods[0] if pods and pods[0].spec.node_name else None

    for job in ("hog-a", "hog-b"):  # each takes 80 of one GPU's 100 TFLOPs

        async def admitted(job: str = job) -> httpx.Response | None:
            r = await post(frac_url, frac_yaml(job, namespace, name, "{tflops: 80, vram: 8Gi}"))
            return r if r.status_code == 201 else None

        await eventually(admitted, 20, f"{job} admitted")
        await eventually(lambda job=job: bound(job), 30, f"{job} bound")

    async def queued() -> httpx.Response | None:
        r = await post(frac_url, frac_yaml("waiter", namespace, name, "{tflops: 80, vram: 8Gi}"))
        return r if r.status_code == 201 else None

    r = await eventually(queued, 20, "busy job admitted")
    assert "busy now, queued" in r.json()["message"]
    pods = (await core.list_namespaced_pod(namespace, label_selector="runwhere.ai/job-name=waiter")).items
    assert all(not p.spec.node_name for p in pods)


async def test_gpu_detail_and_usage_come_from_the_controller(
    frac_url: str, namespace: str, pool: tuple[str, list[str]], kube_api: Any
) -> None:
    name, nodes = pool

    async def admitted() -> httpx.Response | None:
        r = await post(frac_url, frac_yaml("share", namespace, name, "{tflops: 40, vram: 8Gi}"))
        return r if r.status_code == 201 else None

    await eventually(admitted, 20, "201 for a share that fits")

    async with httpx.AsyncClient(base_url=frac_url + "/api/v1", timeout=30) as c:

        async def allocated() -> dict[str, Any] | None:
            d = (await c.get("/nodes/gpu-detail", params={"nodeName": nodes[0]})).json()
            gpus = d["items"][0]["gpus"] if d.get("items") else []
            return d if any(g["pods"] for g in gpus) else None

        d = await eventually(allocated, 30, "the controller to report the fractional worker")
        assert d["controller"] == "ok" and d["items"][0]["source"] == "controller"
        gpus = d["items"][0]["gpus"]
        assert len(gpus) == 2  # the controller's GPU objects, not the node's nvidia.com/gpu count
        busy = [g for g in gpus if g["pods"]]
        assert len(busy) == 1 and busy[0]["allocated"] == 0.4  # 40 of 100 TFLOPs
        assert busy[0]["pods"][0].startswith(f"{namespace}/share-") and busy[0]["memory"] == "80Gi"

        # the GPU holding a fractional worker counts as used on its node, with no whole-GPU request
        item = next(
            n for n in (await c.get("/nodes", params={"pageSize": 1000})).json()["items"]
            if n["nodeName"] == nodes[0]
        )  # fmt: skip
        assert (item["gpuUsed"], item["gpuFree"]) == (1, 7)


async def test_unreachable_controller_falls_back_to_node_capacity(devcluster: Any) -> None:
    settings = make_settings(devcluster, controller_address=f"127.0.0.1:{free_port()}")
    with ServerThread(settings) as url:
        async with httpx.AsyncClient(base_url=url + "/api/v1", timeout=30) as c:
            r = await c.get("/nodes/gpu-detail", params={"nodeName": "gpu-node-0"})
            assert r.status_code == 200
            d = r.json()
            assert d["controller"].startswith("unavailable") and d["items"][0]["source"] == "requests"
            assert len(d["items"][0]["gpus"]) == 8
            assert (await c.get("/pools")).status_code == 200
