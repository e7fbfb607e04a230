"""The node scaler: planning (domain/expander.py: one claim covers the pending demand, in-flight
claims are waited for, limits hold), and against the devcluster, unschedulable pods yield one
GPUNodeClaim that is forgotten once its node is Ready, and `GET /api/node-scaler` reports it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from controller_testkit import GROUP, VERSION, create_pod, eventually, wait_bound, wait_unschedulable
from kubernetes_asyncio import client

from devcluster.k8s_ops import create_node, wait_nodes_ready
from devcluster.nodes import NodeShape, gpu_node
from devcluster.services import ServiceProcess
from gpuplane_controller.domain.expander import (
    Demand,
    GpuShape,
    InFlightClaim,
    NodeTemplate,
    PoolLimits,
    choose_templates,
    plan_expansion,
)

GIB = 2**30
H100 = GpuShape("H100", "NVIDIA", 100_000, 100_000, 80 * GIB)
A100 = GpuShape("A100", "NVIDIA", 50_000, 50_000, 40 * GIB)
NODE2 = NodeTemplate("n0", (H100, H100))


def d(key: str, tflops: int = 60, vram: int = 10, count: int = 1, **kw: object) -> Demand:
    return Demand(key=key, pool="p", gpu_count=count, tflops_m=tflops * 1000, vram=vram * GIB, **kw)  # type: ignore[arg-type]


def test_one_claim_covers_demand_that_fits_one_node() -> None:
    plan = plan_expansion([d("ns/a"), d("ns/b")], {"p": [NODE2]}, [], {})
    assert len(plan.new_claims) == 1
    assert sorted(plan.new_claims[0].pods) == ["ns/a", "ns/b"]
    assert plan.assigned == {"ns/a": "new-0", "ns/b": "new-0"}


def test_more_demand_opens_just_enough_claims() -> None:
    plan = plan_expansion([d(f"ns/{i}") for i in range(5)], {"p": [NODE2]}, [], {})
    assert len(plan.new_claims) == 3  # 2 GPUs per node, one 60-TFLOPs pod per GPU
    assert not plan.unfit


def test_in_flight_claim_absorbs_demand_and_no_new_claim() -> None:
    inflight = [InFlightClaim("p-1", "p", (H100, H100))]
    plan = plan_expansion([d("ns/a"), d("ns/b")], {"p": [NODE2]}, inflight, {})
    assert plan.new_claims == []
    assert plan.assigned == {"ns/a": "p-1", "ns/b": "p-1"}


def test_cap_on_claims_in_flight_waits() -> None:
    inflight = [InFlightClaim("p-1", "p", (H100,))]
    limits = {"p": PoolLimits(max_inflight_claims=1)}
    plan = plan_expansion([d("ns/a"), d("ns/b")], {"p": [NODE2]}, inflight, limits)
    assert plan.new_claims == [] and len(plan.assigned) == 1
    assert len(plan.unfit) == 1 and "in flight" in next(iter(plan.unfit.values()))


def test_max_resources_bound_expansion() -> None:
    limits = {"p": PoolLimits(max_inflight_claims=10, current_tflops_m=200_000, max_tflops_m=300_000)}
    plan = plan_expansion([d("ns/a")], {"p": [NODE2]}, [], limits)
    assert plan.new_claims == []
    assert "maxResources" in plan.unfit["ns/a"]


def test_unfit_requests_get_a_reason() -> None:
    plan = plan_expansion(
        [d("ns/big", count=4), d("ns/model", model="L4"), Demand("ns/other", pool="q")],
        {"p": [NODE2]},
        [],
        {},
    )
    assert plan.new_claims == []
    assert set(plan.unfit) == {"ns/big", "ns/model", "ns/other"}
    assert "no GPU node" in plan.unfit["ns/other"]


def test_other_template_used_for_another_model_and_whole_gpu() -> None:
    templates = choose_templates({"n0": [H100, H100], "n1": [A100]})
    assert [t.template_node for t in templates] == ["n0", "n1"]
    plan = plan_expansion(
        [
            d("ns/a100", tflops=10, model="a100"),
            d("ns/w1", whole_gpu=True),
            d("ns/w2", tflops=1, whole_gpu=True),
        ],
        {"p": templates},
        [],
        {},
    )
    assert len(plan.new_claims) == 2
    shapes = {c.template.template_node: sorted(c.pods) for c in plan.new_claims}
    assert shapes == {"n0": ["ns/w1", "ns/w2"], "n1": ["ns/a100"]}


def test_compute_percent_sized_per_gpu() -> None:
    plan = plan_expansion(
        [Demand("ns/p", pool="p", percent_m=50_000)] * 1, {"p": [NodeTemplate("n", (H100,))]}, [], {}
    )
    assert len(plan.new_claims) == 1
    # 3 pods at 50% need 2 single-GPU nodes
    plan = plan_expansion(
        [Demand(f"ns/{i}", pool="p", percent_m=50_000) for i in range(3)],
        {"p": [NodeTemplate("n", (H100,))]},
        [],
        {},
    )
    assert len(plan.new_claims) == 2


# ---- against the devcluster ----------------------------------------------------------------------
async def _gpu(custom: Any, name: str, node: str, index: int) -> None:
    await custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "gpus",
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPU", "metadata": {"name": name}},
    )
    status = {
        "phase": "Running",
        "vendor": "NVIDIA",
        "model": "H100",
        "uuid": name,
        "index": index,
        "capacity": {"tflops": "100", "vram": "80Gi"},
        "available": {"tflops": "100", "vram": "80Gi"},
        "nodeSelector": {"kubernetes.io/hostname": node},
    }
    await custom.patch_cluster_custom_object_status(
        GROUP, VERSION, "gpus", name, {"status": status}, _content_type="application/merge-patch+json"
    )


async def test_unschedulable_pods_get_one_claim_until_its_node_is_ready(
    devcluster: Any, kube_api: Any, namespace: str, make_pool: Any
) -> None:
    custom = client.CustomObjectsApi(kube_api)
    core = client.CoreV1Api(kube_api)
    pool = await make_pool(nodes=1, gpus_per_node=2)  # 2 x (100 TFLOPs, 80Gi)
    await custom.patch_cluster_custom_object(
        GROUP,
        VERSION,
        "gpupools",
        pool.name,
        {"spec": {"nodeManagerConfig": {"provisioningMode": "Provisioned"}}},
        _content_type="application/merge-patch+json",
    )
    proc = ServiceProcess.controller(
        devcluster.kubeconfig,
        args=["-enable-auto-expander", "-leader-elect=false"],
        env={"GPUPLANE_CONTROLLER_EXPANDER_INTERVAL_SECONDS": "0.5"},
    )
    new_node = ""
    with proc:
        async with httpx.AsyncClient(timeout=10) as http:

            async def scaler() -> dict[str, Any]:
                r = await http.get(f"{proc.url}/api/node-scaler")
                assert r.status_code == 200
                body: dict[str, Any] = r.json()
                assert set(body) == {"data"}
                assert set(body["data"]) == {
                    "inFlightNodes",
                    "inFlightNodeClaims",
                    "preSchedulePods",
                    "preScheduleTimerNum",
                }
                return body["data"]  # type: ignore[no-any-return]

            async def claims() -> list[dict[str, Any]]:
                got = await custom.list_cluster_custom_object(
                    GROUP, VERSION, "gpunodeclaims", label_selector=f"tensor-fusion.ai/gpupool={pool.name}"
                )
                return list(got["items"])

            for i in range(2):
                await create_pod(
                    kube_api, namespace, f"fill-{i}", pool.name, tflops_request="80", vram_request="1Gi"
                )
            for i in range(2):
                await wait_bound(kube_api, namespace, f"fill-{i}", timeout=60)
            for i in range(2):
                await create_pod(
                    kube_api, namespace, f"wait-{i}", pool.name, tflops_request="80", vram_request="1Gi"
                )
            for i in range(2):
                await wait_unschedulable(kube_api, namespace, f"wait-{i}", timeout=60)

            async def covered() -> dict[str, Any] | None:
                data = await scaler()
                return data if len(data["preSchedulePods"]) == 2 else None

            data = await eventually(covered, what="both pending pods pre-scheduled on a claim")
            got = await claims()
            assert len(got) == 1, [c["metadata"]["name"] for c in got]  # one claim covers both pods
            claim = got[0]
            spec = claim["spec"]
            assert (
                spec["gpuDeviceOffered"] == 2
                and spec["tflopsOffered"] == "200"
                and spec["vramOffered"] == "160Gi"
            )
            assert spec["extraParams"]["gpuModel"] == "H100"
            assert claim["metadata"]["ownerReferences"][0]["kind"] == "GPUPool"
            name = claim["metadata"]["name"]
            new_node = spec["nodeName"]
            assert set(data["inFlightNodeClaims"]) == {name}
            assert len(data["inFlightNodes"][new_node]) == 2
            assert {p["claim"] for p in data["preSchedulePods"].values()} == {name}
            assert set(data["preSchedulePods"]) == {f"{namespace}/wait-0", f"{namespace}/wait-1"}
            assert data["preScheduleTimerNum"] == 2

            async def told() -> bool:
                evs = (await core.list_namespaced_event(namespace)).items
                return any(e.reason == "NodeExpansionCheck" and name in e.message for e in evs)

            await eventually(told, what="pods told which claim they wait for")

            # More passes while the claim is in flight: no claim storm.
            await asyncio.sleep(2.5)
            assert len(await claims()) == 1

            # The provisioner delivers: the node joins the pool and becomes Ready; its hypervisor
            # reports GPUs. The claim is no longer in flight and the pods land on the new node.
            await create_node(core, gpu_node(new_node, NodeShape(gpus=2), {"test-pool": pool.name}))
            try:
                await wait_nodes_ready(kube_api, [new_node], lambda _m: None, timeout=60)

                # Ready but no GPUs reported yet: still in flight, and no second claim.
                await asyncio.sleep(2.0)
                assert len(await claims()) == 1
                assert name in (await scaler())["inFlightNodeClaims"]
                for i in range(2):
                    gpu = f"{new_node}-gpu-{i}"
                    pool.gpus.setdefault(new_node, []).append(gpu)
                    await _gpu(custom, gpu, new_node, i)

                async def bound_claim() -> bool:
                    c = await custom.get_cluster_custom_object(GROUP, VERSION, "gpunodeclaims", name)
                    return (c.get("status") or {}).get("phase") == "Bound"

                await eventually(bound_claim, what="claim Bound once its node is Ready")
                data = await eventually(
                    lambda: _empty(scaler), what="no claims in flight after the node is Ready"
                )
                for i in range(2):
                    p = await wait_bound(kube_api, namespace, f"wait-{i}", timeout=60)
                    assert p.spec.node_name == new_node
                assert len(await claims()) == 1
            finally:
                await core.delete_node(new_node)


async def _empty(scaler: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any] | None:
    data = await scaler()
    return data if not data["inFlightNodeClaims"] and not data["inFlightNodes"] else None
