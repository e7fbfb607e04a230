"""Hypervisor and controller as real processes on the devcluster: the controller's GPU objects
come from the hypervisor's report, and a pod the controller schedules shows up in the
hypervisor's /api/v1/workers within a second."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from kubernetes_asyncio import client

from gpuplane.controller.v1 import node_agent_pb2 as pb
from gpuplane.controller.v1 import node_agent_pb2_grpc as pb_grpc

GROUP, VERSION = "tensor-fusion.ai", "v1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _exe(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


def _wait_http(proc: subprocess.Popen[bytes], url: str, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready at {url}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _serves_node_agent(port: int) -> bool:
    """Whether the controller serves NodeAgentService (an empty request is refused, not unimplemented)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        try:
            pb_grpc.NodeAgentServiceStub(ch).RegisterNode(pb.RegisterNodeRequest(), timeout=5)
        except grpc.RpcError as e:
            return e.code() != grpc.StatusCode.UNIMPLEMENTED
    return True


@pytest.fixture
def controller_proc(devcluster: Any) -> Iterator[dict[str, Any]]:
    http, grpc_port = free_port(), free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(devcluster.kubeconfig),
        "GPUPLANE_CONTROLLER_HTTP_HOST": "127.0.0.1",
        "GPUPLANE_CONTROLLER_HTTP_PORT": str(http),
        "GPUPLANE_CONTROLLER_GRPC_HOST": "127.0.0.1",
        "GPUPLANE_CONTROLLER_GRPC_PORT": str(grpc_port),
        "GPUPLANE_CONTROLLER_LOG_JSON": "false",
    }
    proc = subprocess.Popen([_exe("tf-controller")], env=env)
    try:
        try:
            _wait_http(proc, f"http://127.0.0.1:{http}/readyz", "tf-controller")
        except (AssertionError, TimeoutError) as e:
            pytest.skip(f"the controller is not runnable yet: {e}")
        if not _serves_node_agent(grpc_port):
            pytest.skip("the controller does not serve NodeAgentService yet")
        yield {
            "grpc": f"127.0.0.1:{grpc_port}",
            "http": f"http://127.0.0.1:{http}",
            "kubeconfig": str(devcluster.kubeconfig),
        }
    finally:
        _stop(proc)


# Two service processes plus a kwok node: the one end-to-end check of the node-agent flow, so it
# runs in `make test` even though it takes 30-45 s on a loaded 2-core machine.
async def test_report_creates_gpus_and_scheduled_pod_becomes_a_worker(
    controller_proc: dict[str, Any], kube_api: Any, namespace: str, make_gpu_nodes: Any, tmp_path: Path
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
    port = free_port()
    hyp = subprocess.Popen(  # noqa: ASYNC220 - started once, before anything is timed
        [
            _exe("tf-hypervisor"),
            "--node-name", node,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--backend", "simulated",
            "--simulated-devices", "2xH100-80GB",
            "--controller", controller_proc["grpc"],
            "--state-file", str(tmp_path / "state.json"),
        ],
        env={**os.environ, "KUBECONFIG": controller_proc["kubeconfig"], "GPUPLANE_HYPERVISOR_LOG_JSON": "0"},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        await asyncio.to_thread(_wait_http, hyp, f"{base}/readyz", "tf-hypervisor")
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
        _stop(hyp)
        for o in (await custom.list_cluster_custom_object(
            GROUP, VERSION, "gpus", label_selector=f"tensor-fusion.ai/node={node}"
        ))["items"]:  # fmt: skip
            await custom.delete_cluster_custom_object(GROUP, VERSION, "gpus", o["metadata"]["name"])
        await custom.delete_cluster_custom_object(GROUP, VERSION, "gpupools", pool)
