"""Hypervisor heartbeat loss with two controller replicas behind one Service: heartbeats that land
on the follower renew the node's Lease, so the leader does not mark the node lost; when they stop,
the leader marks the GPUNode and its GPUs Unknown and the scheduler stops placing pods there;
when they come back, everything is Running again and pending pods are placed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from controller_testkit import GROUP, VERSION, create_pod, device, eventually, wait_bound, wait_unschedulable
from kubernetes_asyncio import client

from devcluster.services import ServiceProcess
from gpuplane.controller.v1 import node_agent_pb2, node_agent_pb2_grpc, types_pb2
from gpuplane_core.grpc.client import NODE_AGENT, make_channel

TIMEOUT = 2.0


async def _leading(http: httpx.AsyncClient, proc: ServiceProcess) -> bool:
    text = (await http.get(f"{proc.url}/metrics")).text
    return "gpuplane_controller_leader 1.0" in text


@contextlib.asynccontextmanager
async def _heartbeating(target: str, node: str, devices: list[types_pb2.Device]) -> AsyncIterator[None]:
    async def loop() -> None:
        async with make_channel(target, NODE_AGENT) as ch:
            agent = node_agent_pb2_grpc.NodeAgentServiceStub(ch)
            while True:
                await agent.Heartbeat(node_agent_pb2.HeartbeatRequest(node_name=node, devices=devices))
                await asyncio.sleep(1.0)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled() or task.exception() is None


async def test_heartbeat_loss_marks_unknown_across_replicas(
    devcluster: Any, kube_api: Any, namespace: str, make_pool: Any
) -> None:
    pool = await make_pool(nodes=1, gpus_per_node=0)
    node = pool.nodes[0]
    env = {
        "GPUPLANE_CONTROLLER_LEASE_NAMESPACE": namespace,
        "GPUPLANE_CONTROLLER_LEASE_DURATION_SECONDS": "6",
        "GPUPLANE_CONTROLLER_RENEW_DEADLINE_SECONDS": "4",
        "GPUPLANE_CONTROLLER_RETRY_PERIOD_SECONDS": "1",
        "GPUPLANE_CONTROLLER_HEARTBEAT_LEASE_NAMESPACE": namespace,
        "GPUPLANE_CONTROLLER_HEARTBEAT_INTERVAL_SECONDS": "1",
        "GPUPLANE_CONTROLLER_HEARTBEAT_TIMEOUT_SECONDS": str(TIMEOUT),
    }
    custom = client.CustomObjectsApi(kube_api)
    coord = client.CoordinationV1Api(kube_api)
    a = ServiceProcess.controller(devcluster.kubeconfig, env=env)
    b = ServiceProcess.controller(devcluster.kubeconfig, env=env)
    gpus = [f"gpu-{node}-0", f"gpu-{node}-1"]
    # Both replicas start at once (start() blocks until /readyz).
    await asyncio.gather(asyncio.to_thread(a.start), asyncio.to_thread(b.start))
    try:
        async with httpx.AsyncClient(timeout=10) as http:

            async def one_leader() -> tuple[ServiceProcess, ServiceProcess] | None:
                la, lb = await _leading(http, a), await _leading(http, b)
                return (a, b) if la and not lb else (b, a) if lb and not la else None

            _leader, follower = await eventually(one_leader, what="exactly one leader")
            devices = [device(node, 0), device(node, 1)]
            try:
                async with make_channel(follower.grpc_target, NODE_AGENT) as ch:
                    await node_agent_pb2_grpc.NodeAgentServiceStub(ch).RegisterNode(
                        node_agent_pb2.RegisterNodeRequest(
                            node_name=node, hypervisor_version="t", devices=devices
                        )
                    )
                pool.gpus[node] = gpus  # deleted with the pool

                async def gpu_phases() -> list[str]:
                    objs = [await custom.get_cluster_custom_object(GROUP, VERSION, "gpus", g) for g in gpus]
                    return [o["status"]["phase"] for o in objs]

                async def hv_state() -> str:
                    obj = await custom.get_cluster_custom_object(GROUP, VERSION, "gpunodes", node)
                    return str(obj["status"]["hypervisorStatus"]["hypervisorState"])

                async with _heartbeating(follower.grpc_target, node, devices):
                    lease = await coord.read_namespaced_lease(f"tf-hypervisor-{node}", namespace)
                    assert lease.spec.holder_identity == node and lease.spec.renew_time is not None
                    assert lease.metadata.owner_references[0].kind == "GPUNode"
                    # Twice the timeout with heartbeats going only to the follower: the leader sees
                    # them through the Lease and leaves the node alone.
                    await asyncio.sleep(2 * TIMEOUT + 1)
                    assert await gpu_phases() == ["Running", "Running"]
                    assert await hv_state() == "Running"
                    await create_pod(
                        kube_api, namespace, "before", pool.name, tflops_request="10", vram_request="1Gi"
                    )
                    await wait_bound(kube_api, namespace, "before", timeout=60)

                # Heartbeats stop: Unknown after the timeout.
                async def lost() -> bool:
                    return await hv_state() == "Unknown" and await gpu_phases() == ["Unknown", "Unknown"]

                await eventually(lost, timeout=TIMEOUT + 20, what="node and GPUs Unknown")
                gpu = await custom.get_cluster_custom_object(GROUP, VERSION, "gpus", gpus[0])
                assert gpu["status"]["message"] == "hypervisor heartbeat lost"
                await create_pod(
                    kube_api, namespace, "during", pool.name, tflops_request="10", vram_request="1Gi"
                )
                message = await wait_unschedulable(kube_api, namespace, "during", timeout=60)
                assert "no gpus available" in message or "no gpu devices" in message, message

                # Heartbeats come back (to the follower again): Running, and the pending pod is placed.
                async with _heartbeating(follower.grpc_target, node, devices):

                    async def back() -> bool:
                        return await hv_state() == "Running" and await gpu_phases() == ["Running", "Running"]

                    await eventually(back, what="node and GPUs Running again")
                    await wait_bound(kube_api, namespace, "during", timeout=60)
            finally:
                with contextlib.suppress(client.ApiException):
                    await custom.delete_cluster_custom_object(GROUP, VERSION, "gpunodes", node)
    finally:
        a.stop()
        b.stop()
