"""Hypervisor and controller as real processes on the devcluster: the controller's GPU objects
come from the hypervisor's report, and a pod the controller schedules shows up in the
hypervisor's /api/v1/workers within a second."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client

from devcluster.services import ServiceProcess

GROUP, VERSION = "tensor-fusion.ai", "v1"


@pytest.fixture
def controller_proc(devcluster: Any) -> Iterator[ServiceProcess]:
    with ServiceProcess.controller(devcluster.kubeconfig) as proc:
        yield proc


# Two service processes plus a kwok node: the one end-to-end check of the node-agent flow, so it
# runs in `make test` even though it takes 30-45 s on a loaded 2-core machine.
async def test_report_creates_gpus_and_scheduled_pod_becomes_a_worker(
    controller_proc: ServiceProcess, kube_api: Any, namespace: str, make_gpu_nodes: Any, tmp_path: Path
) -> None:
    pool = f"hyp-{secrets.token_hex(3)}"
    # Readiness of the fresh kwok node is not awaited: it is Ready long before the pod is scheduled.
    (node,) = await make_gpu_nodes(1, labels={"test-pool": pool}, wait_ready=False)
    custom = client.CustomObjectsApi(kube_api)
    await custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "gpupools",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GPUPool",
            "metadata": {"name": pool},
            "spec": {
                "nodeManagerConfig": {
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "test-pool", "operator": "In", "values": [pool]}]}
                        ]
                    }
                }
            },
        },
    )
    hyp = ServiceProcess("tf-hypervisor", "GPUPLANE_HYPERVISOR_", controller_proc.env["KUBECONFIG"])
    hyp.args = [
        "--node-name", node,
        "--host", "127.0.0.1",
        "--port", str(hyp.http_port),
        "--backend", "simulated",
        "--simulated-devices", "2xH100-80GB",
        "--controller", controller_proc.grpc_target,
        "--state-file", str(tmp_path / "state.json"),
    ]  # fmt: skip
    base = hyp.url
    try:
        await asyncio.to_thread(hyp.start)
        async with httpx.AsyncClient(base_url=base) as http:
            devices = (await http.get("/api/v1/devices")).json()["data"]
            uuids = sorted(d["UUID"] for d in devices)
            # The controller writes GPU objects from the report.
            deadline = time.monotonic() + 20
            while True:
                objs = await custom.list_cluster_custom_object(
                    GROUP, VERSION, "gpus", label_selector=f"tensor-fusion.ai/node={node}"
                )
                reported = sorted(o.get("status", {}).get("uuid", "") for o in objs["items"])
                if reported == uuids:
                    break
                assert time.monotonic() < deadline, f"GPU objects {reported} != reported devices {uuids}"
                await asyncio.sleep(0.2)
            gpu = objs["items"][0]["status"]
            assert gpu["model"] == "H100" and gpu["phase"] == "Running"
            assert gpu["capacity"]["vram"] == "80Gi"

            # A fractional pod scheduled by the controller becomes a worker on this node.
            core = client.CoreV1Api(kube_api)
            await core.create_namespaced_pod(
                namespace,
                {
                    "metadata": {
                        "name": "frac",
                        "labels": {"tensor-fusion.ai/enabled": "true"},
                        "annotations": {
                            "tensor-fusion.ai/gpupool": pool,
                            "tensor-fusion.ai/tflops-request": "100",
                            "tensor-fusion.ai/vram-request": "10Gi",
                            "tensor-fusion.ai/qos": "low",
                        },
                    },
                    "spec": {
                        "schedulerName": "tensor-fusion-scheduler",
                        "tolerations": [
                            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                        ],
                        "containers": [{"name": "main", "image": "busybox"}],
                    },
                },
            )
            deadline = time.monotonic() + 30
            while True:
                pod = await core.read_namespaced_pod("frac", namespace)
                if pod.spec.node_name:
                    bound_at = time.monotonic()
                    break
                assert time.monotonic() < deadline, "the controller did not bind the pod"
                await asyncio.sleep(0.05)
            assert pod.spec.node_name == node
            uid = pod.metadata.uid
            while True:
                r = await http.get(f"/api/v1/workers/{uid}")
                if r.status_code == 200:
                    seen_after = time.monotonic() - bound_at
                    break
                assert time.monotonic() - bound_at < 5, "the worker never appeared"
                await asyncio.sleep(0.02)
            assert seen_after < 1.0, f"worker appeared {seen_after:.2f}s after the bind"
            worker = r.json()["data"]
            assert worker["Namespace"] == namespace and worker["WorkerName"] == "frac"
            assert worker["QoS"] == "low" and worker["Requests"]["tflops"] == 100.0
            assert worker["AllocatedDevices"][0] in uuids
    finally:
        hyp.stop()
        for o in (await custom.list_cluster_custom_object(
            GROUP, VERSION, "gpus", label_selector=f"tensor-fusion.ai/node={node}"
        ))["items"]:  # fmt: skip
            await custom.delete_cluster_custom_object(GROUP, VERSION, "gpus", o["metadata"]["name"])
        await custom.delete_cluster_custom_object(GROUP, VERSION, "gpupools", pool)
