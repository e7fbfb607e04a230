"""The controller's gRPC side against the devcluster: a hypervisor registering its devices
(GPU/GPUNode objects appear and are scheduled on), the allocation stream, capacity views."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
import yaml
from controller_testkit import (
    GROUP,
    VERSION,
    ControllerProc,
    create_pod,
    device,
    gpus_of,
    pod_manifest,
    wait_bound,
)
from kubernetes_asyncio import client

from gpuplane.controller.v1 import (
    capacity_pb2,
    capacity_pb2_grpc,
    node_agent_pb2,
    node_agent_pb2_grpc,
    types_pb2,
)
from gpuplane_core.errors import NotFound
from gpuplane_core.grpc.client import CAPACITY, NODE_AGENT, SIMULATE, WATCH_ALLOCATIONS, make_channel
from gpuplane_core.grpc.errors import error_from_rpc

Event = node_agent_pb2.AllocationEvent


async def test_hypervisor_registration_stream_and_capacity(
    controller: ControllerProc, kube_api: Any, namespace: str, make_pool: Any
) -> None:
    pool = await make_pool(nodes=1, gpus_per_node=0)
    node = pool.nodes[0]
    target = f"127.0.0.1:{controller.grpc_port}"
    async with make_channel(target, NODE_AGENT, WATCH_ALLOCATIONS, CAPACITY, SIMULATE) as channel:
        agent = node_agent_pb2_grpc.NodeAgentServiceStub(channel)
        cap = capacity_pb2_grpc.CapacityServiceStub(channel)

        with pytest.raises(grpc.aio.AioRpcError) as e:
            await agent.Heartbeat(node_agent_pb2.HeartbeatRequest(node_name=node))
        assert isinstance(error_from_rpc(e.value), NotFound)

        resp = await agent.RegisterNode(
            node_agent_pb2.RegisterNodeRequest(
                node_name=node, hypervisor_version="0.1.0", devices=[device(node, 0), device(node, 1)]
            )
        )
        assert resp.heartbeat_interval_seconds > 0
        await agent.Heartbeat(
            node_agent_pb2.HeartbeatRequest(node_name=node, devices=[device(node, 0), device(node, 1)])
        )
        custom = client.CustomObjectsApi(kube_api)
        gpu0 = f"gpu-{node}-0"
        obj = await custom.get_cluster_custom_object(GROUP, VERSION, "gpus", gpu0)
        assert obj["status"]["nodeSelector"] == {"kubernetes.io/hostname": node}
        assert obj["status"]["capacity"] == {"tflops": "989", "vram": "80Gi"}
        assert obj["status"]["phase"] == "Running"
        gnode = await custom.get_cluster_custom_object(GROUP, VERSION, "gpunodes", node)
        assert gnode["status"]["totalGPUs"] == 2 and gnode["status"]["totalVRAM"] == "160Gi"
        pool.gpus[node] = [gpu0, f"gpu-{node}-1"]  # cleaned up with the pool
        try:
            stream = agent.WatchAllocations(node_agent_pb2.WatchAllocationsRequest(node_name=node))
            first = await stream.read()
            assert first.type == Event.TYPE_RESET
            assert (await stream.read()).type == Event.TYPE_SYNCED

            # The controller sees the new GPUs: capacity and scheduling use them.
            for _ in range(50):
                pools = (await cap.GetPoolCapacity(capacity_pb2.GetPoolCapacityRequest(pool=pool.name))).pools
                if pools and pools[0].gpu_count == 2:
                    break
                await asyncio.sleep(0.1)
            assert pools[0].total_tflops == "1978" and pools[0].gpu_models == ["H100"]
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await cap.GetPoolCapacity(capacity_pb2.GetPoolCapacityRequest(pool="no-such-pool"))
            assert e.value.code() == grpc.StatusCode.NOT_FOUND

            await create_pod(kube_api, namespace, "w", pool.name, tflops_request="100", vram_request="10Gi")
            w = await wait_bound(kube_api, namespace, "w")
            ev = await asyncio.wait_for(stream.read(), 10)
            assert ev.type == Event.TYPE_ADDED and ev.allocation.pod_uid == w.metadata.uid
            assert list(ev.allocation.gpu_names) == gpus_of(w)
            assert ev.allocation.gpu_uuids[0] == f"gpu-{node}-{gpus_of(w)[0][-1]}"
            assert ev.allocation.request.tflops == "100" and ev.allocation.request.vram == "10Gi"
            assert ev.allocation.qos == types_pb2.QOS_LEVEL_HIGH

            listing = await cap.ListGpuAllocations(capacity_pb2.ListGpuAllocationsRequest(node_name=node))
            held = [g for g in listing.gpus if g.workers]
            assert len(listing.gpus) == 2 and len(held) == 1 and held[0].available.tflops == "889"

            too_big = yaml.safe_dump(
                pod_manifest("huge", pool.name, tflops_request="2000", vram_request="1Gi")
            )
            sim = await cap.SimulateSchedule(
                capacity_pb2.SimulateScheduleRequest(pod_manifest=too_big.encode())
            )
            assert not sim.schedulable and sim.failed_filter == "GPUResourceFilter"
            assert sim.filter_stages[0].name == "PhaseFilter" and len(sim.filter_stages) == 10
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await cap.SimulateSchedule(
                    capacity_pb2.SimulateScheduleRequest(pod_manifest=b"kind: Service")
                )
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT

            await client.CoreV1Api(kube_api).delete_namespaced_pod("w", namespace, grace_period_seconds=0)
            ev = await asyncio.wait_for(stream.read(), 10)
            assert ev.type == Event.TYPE_DELETED and ev.allocation.pod_uid == w.metadata.uid
            stream.cancel()

            # A new stream lists what is there now.
            await create_pod(kube_api, namespace, "w2", pool.name, tflops_request="10", vram_request="1Gi")
            w2 = await wait_bound(kube_api, namespace, "w2")
            stream = agent.WatchAllocations(node_agent_pb2.WatchAllocationsRequest(node_name=node))
            events = [await stream.read() for _ in range(3)]
            assert [e.type for e in events] == [Event.TYPE_RESET, Event.TYPE_ADDED, Event.TYPE_SYNCED]
            assert events[1].allocation.pod_uid == w2.metadata.uid
            stream.cancel()
        finally:
            await custom.delete_cluster_custom_object(GROUP, VERSION, "gpunodes", node)
